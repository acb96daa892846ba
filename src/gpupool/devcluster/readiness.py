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


def nodes_ready(api: KubeApi, names: list[str]) -> bool:
    if not names:
        return True
    try:
        items = api.get("/api/v1/nodes")["items"]
    except _NOT_YET:
        return False
    ready = {item["metadata"]["name"] for item in items if ready_for_pods(item)}
    return all(name in ready for name in names)


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


def gpunodes_beating(api: KubeApi, nodes: list[str]) -> bool:
    """Every fake GPU node among `nodes` has a GpuNode with a heartbeat."""
    try:
        selector = urllib.parse.quote(f"{LABEL_GPU_MODEL},{LABEL_GPU_MEMORY}", safe=",")
        gpu_nodes = api.get(f"/api/v1/nodes?labelSelector={selector}")["items"]
        items = api.get(f"/apis/{API_VERSION}/gpunodes")["items"]
    except _NOT_YET:
        return False
    beating = {g["metadata"]["name"] for g in items if (g.get("status") or {}).get("heartbeat")}
    wanted = {n["metadata"]["name"] for n in gpu_nodes} & set(nodes)
    return wanted <= beating


def wait(record: ProcessRecord, timeout_s: float, ready: Callable[[], bool]) -> None:
    """Until `ready()`; ComponentNotReady (with the log's tail) if the process exits first or
    the deadline passes."""
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
