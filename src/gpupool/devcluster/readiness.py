"""When the dev cluster's parts are ready: probes (each True/False, never raising while a
component starts) and the wait that runs one against its process's life and a deadline."""

from __future__ import annotations

import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

from gpupool.adapters.wire.names import API_VERSION, LABEL_GPU_MEMORY, LABEL_GPU_MODEL
from gpupool.devcluster import processes
from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.errors import ApiError, ComponentNotReady
from gpupool.devcluster.nodes import ready_for_pods
from gpupool.devcluster.patience import ProgressWatch, Reading, Verdict
from gpupool.devcluster.processes import ProcessRecord

# What a component that is still starting answers: not yet.
_NOT_YET = (ApiError, urllib.error.URLError, OSError)


def http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(url, timeout=2) as resp:
            return int(resp.status) == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def insecure_context() -> ssl.SSLContext:
    """For the /healthz of kube-scheduler and kube-controller-manager, which serve
    self-signed certificates of their own."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def apiserver_ready(api: KubeApi) -> bool:
    try:
        return bool(api.get("/readyz") == "ok")
    except _NOT_YET:
        return False


def default_account(api: KubeApi) -> bool:
    try:
        api.get("/api/v1/namespaces/default/serviceaccounts/default")
    except _NOT_YET:
        return False
    return True


def nodes_ready(api: KubeApi, names: list[str]) -> Reading | None:
    """How many of `names` are Ready for pods (None: the API server did not answer). The list
    is served from the API server's watch cache (`resourceVersion=0`), not a quorum read."""
    if not names:
        return Reading(0, 0)
    try:
        items = api.get("/api/v1/nodes?resourceVersion=0")["items"]
    except _NOT_YET:
        return None
    ready = {item["metadata"]["name"] for item in items if ready_for_pods(item)}
    return Reading(sum(1 for name in names if name in ready), len(names))


def crds_established(api: KubeApi, names: list[str]) -> bool:
    for name in names:
        try:
            crd = api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        except _NOT_YET:
            return False
        conditions = (crd.get("status") or {}).get("conditions") or []
        if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return False
    return True


def gpunodes_beating(api: KubeApi, nodes: list[str]) -> Reading | None:
    """How many fake GPU nodes among `nodes` (those labelled with a model of known memory
    size) have a GpuNode with its report (the heartbeat writes both it and the node's Lease);
    None while the API server does not answer."""
    try:
        selector = urllib.parse.quote(f"{LABEL_GPU_MODEL},{LABEL_GPU_MEMORY}", safe=",")
        gpu_nodes = api.get(f"/api/v1/nodes?labelSelector={selector}&resourceVersion=0")["items"]
        items = api.get(f"/apis/{API_VERSION}/gpunodes?resourceVersion=0")["items"]
    except _NOT_YET:
        return None
    beating = {g["metadata"]["name"] for g in items if "devices" in (g.get("status") or {})}
    wanted = {n["metadata"]["name"] for n in gpu_nodes} & set(nodes)
    return Reading(len(wanted & beating), len(wanted))


def wait(record: ProcessRecord, timeout_s: float, ready: Callable[[], bool]) -> None:
    """Until `ready()`; ComponentNotReady (with the log's tail) if the process exits first or
    the deadline passes (a yes/no wait; for a count, `wait_progress`)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if not processes.is_running(record):
            raise ComponentNotReady(
                record.name, "the process exited", record.log, processes.tail(record.log)
            )
        if ready():
            return
        if time.monotonic() > deadline:
            raise ComponentNotReady(
                record.name,
                f"not ready after {timeout_s:g}s",
                record.log,
                processes.tail(record.log),
            )
        time.sleep(0.1)


def wait_progress(
    record: ProcessRecord,
    watch: ProgressWatch,
    probe: Callable[[], Reading | None],
    *,
    interval_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Until `probe()` reads all done, as long as `watch` lets it (the count keeps growing,
    within its allowance); ComponentNotReady with `watch`'s reason and the log's tail if it
    gives up or the process exits first."""
    while True:
        if not processes.is_running(record):
            raise ComponentNotReady(
                record.name, "the process exited", record.log, processes.tail(record.log)
            )
        verdict = watch.observe(probe(), clock())
        if verdict is Verdict.READY:
            return
        if verdict is Verdict.GIVE_UP:
            raise ComponentNotReady(
                record.name, watch.reason, record.log, processes.tail(record.log)
            )
        sleep(interval_s)
