"""gpupool's extender, webhook and controller as processes over a dev cluster of their own, as a
user starts them: what the reclaim e2e tests share (not a test module).

`process_stack(root, gpus, label)` brings up two kwok nodes of `gpus` with kube-scheduler calling
the extender, applies the CRDs and deploy/rbac as admin, starts `gpupool extender` (binpack) and
`gpupool controller` (1 s resync) under their ServiceAccounts' identities (client certificates
from the cluster's CA), so their evictions, patches and events go through the roles a real
install gives them, and `gpupool webhook serve` registered for namespaces labelled
`gpupool.io/e2e-<label>=<token>` (as admin: it registers itself, which its role may not), and
stops all of it, the cluster last, when the block ends.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpupool.adapters.kubernetes.crds import load_crds
from gpupool.devcluster import rbac
from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.cluster import DevCluster
from gpupool.devcluster.nodes import node_specs, parse_gpu_spec
from gpupool.devcluster.polling import poll_until
from gpupool.devcluster.ports import free_port
from gpupool.devcluster.scheduler_config import ExtenderConfig
from gpupool.devcluster.spec import ClusterSpec

GPUPOOL = str(Path(sys.executable).parent / "gpupool")
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
GROUP = "/apis/gpupool.io/v1alpha1"
# The controller's safety-net period: 1 s here; GPUPOOL_E2E_CONTROLLER_RESYNC=300 runs these
# tests with the default, so that only changes and the loops' own deadlines start rounds.
CONTROLLER_RESYNC = os.environ.get("GPUPOOL_E2E_CONTROLLER_RESYNC", "1")
LIVE = (None, "Reserved", "Bound", "Active")  # lease phases that hold a card's memory


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def healthy(url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=5) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@dataclass
class Controller:
    """The `gpupool controller` process, which a test may stop and start again."""

    argv: list[str]
    log: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, env=self.env
            )

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
            self.proc = None


@dataclass
class Stack:
    api: KubeApi
    selector: tuple[str, str]  # the namespace label the webhook is registered for
    logs: Path
    controller: Controller
    namespaces: list[str] = field(default_factory=list)  # for a test's own clean-up
    kubeconfig: str = ""  # the cluster admin's (for a gpupool command a test runs)

    def tail(self) -> str:
        parts = []
        for name in ("controller.log", "extender.log", "webhook.log"):
            text = (self.logs / name).read_text(errors="replace")
            parts.append(f"--- {name}\n{text[-3000:]}")
        return "\n".join(parts)


def _established(api: KubeApi, name: str) -> bool:
    conditions = (api.get(f"{CRDS}/{name}").get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


@contextlib.contextmanager
def process_stack(root: Path, gpus: str, label: str, *, nodes: int = 2) -> Iterator[Stack]:
    ext_port, hook_port = free_port(), free_port()
    cluster = DevCluster(root / "cluster")
    state = cluster.up(
        ClusterSpec(
            nodes=tuple(node_specs(nodes, parse_gpu_spec(gpus))),
            extender=ExtenderConfig(url_prefix=f"http://127.0.0.1:{ext_port}/gpupool"),
        ),
        die_with_parent=True,
    )
    api = cluster.api()
    names = [api.create(CRDS, crd)["metadata"]["name"] for crd in load_crds()]
    rbac.apply(api, rbac.load_rbac())
    assert poll_until(lambda: all(_established(api, n) for n in names), timeout_s=30)

    def identity(account: str) -> str:
        user = rbac.service_account_user(account)
        return str(cluster.user_kubeconfig(user, rbac.service_account_groups()))

    env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost"}
    token = secrets.token_hex(3)
    selector = (f"gpupool.io/e2e-{label}", token)
    name = f"gpupool-{label}-{token}"
    kubeconfig = state.kubeconfig
    procs: list[subprocess.Popen[bytes]] = []
    logs = {n: (root / f"{n}.log").open("wb") for n in ("extender", "webhook")}
    controller: Controller | None = None
    try:
        procs.append(
            subprocess.Popen(
                [GPUPOOL, "extender", "--kubeconfig", identity("gpupool-extender"),
                 "--port", str(ext_port), "--policy", "binpack", "--resync-seconds", "30"],
                stdout=logs["extender"], stderr=subprocess.STDOUT, env=env,
            )
        )  # fmt: skip
        assert (
            poll_until(
                lambda: (
                    healthy(f"http://127.0.0.1:{ext_port}/healthz") or procs[0].poll() is not None
                ),
                timeout_s=60,
            )
            and procs[0].poll() is None
        ), (root / "extender.log").read_text()
        procs.append(
            subprocess.Popen(
                [GPUPOOL, "webhook", "serve", "--host", "127.0.0.1", "--port", str(hook_port),
                 "--cert-dir", str(root / "certs"), "--kubeconfig", kubeconfig,
                 "--register-url", f"https://127.0.0.1:{hook_port}",
                 "--namespace-label", f"{selector[0]}={selector[1]}", "--name", name,
                 "--unregister-on-exit"],
                stdout=logs["webhook"], stderr=subprocess.STDOUT, env=env,
            )
        )  # fmt: skip
        controller_argv = [GPUPOOL, "controller", "--resync", CONTROLLER_RESYNC]
        controller_argv += ["--kubeconfig", identity("gpupool-controller")]
        controller = Controller(controller_argv, root / "controller.log", env)
        controller.start()
        registered = poll_until(
            lambda: api.exists(
                f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{name}"
            ),
            timeout_s=30,
        )
        assert registered, (root / "webhook.log").read_text()
        yield Stack(api, selector, root, controller, kubeconfig=kubeconfig)
    finally:
        if controller is not None:
            controller.stop()
        for proc in reversed(procs):
            stop_process(proc)
        for handle in logs.values():
            handle.close()
        cluster.down()


def lease_of(s: Stack, ns: str, uid: str) -> dict[str, Any]:
    """The pod's GpuLease once it exists: the extender creates it after the Binding, in the
    background, so a pod can be Running a moment before its lease is there."""
    lease = poll_until(lambda: s.api.find(f"{GROUP}/namespaces/{ns}/gpuleases/{uid}"), timeout_s=30)
    assert lease is not None, f"no lease {ns}/{uid} 30 s after its pod ran\n{s.tail()}"
    found: dict[str, Any] = lease
    return found


def lease_ends_reclaimed(s: Stack, ns: str, uid: str) -> dict[str, Any]:
    """The evicted pod's GpuLease (named after its uid), once ended: Reclaimed (reason Evicted),
    metered, not Released (PodGone)."""

    def ended() -> dict[str, Any] | None:
        lease: dict[str, Any] = s.api.get(f"{GROUP}/namespaces/{ns}/gpuleases/{uid}")
        return lease if (lease.get("status") or {}).get("phase") not in LIVE else None

    lease = poll_until(ended, timeout_s=30, interval_s=0.2)
    assert lease is not None, f"lease {ns}/{uid} never ended\n{s.tail()}"
    status = lease["status"]
    assert status["phase"] == "Reclaimed", status
    condition = next(c for c in status["conditions"] if c["type"] == "Reclaimed")
    assert condition["reason"] == "Evicted", condition
    assert status["gibHours"] >= 0 and status["end"] >= status["reclaim"]["at"], status
    return lease


def pod_get(api: KubeApi, ns: str, name: str) -> dict[str, Any] | None:
    pod: dict[str, Any] | None = api.find(f"/api/v1/namespaces/{ns}/pods/{name}")
    return pod


def pod_running(api: KubeApi, ns: str, name: str) -> dict[str, Any] | None:
    pod = pod_get(api, ns, name)
    return pod if pod and pod["status"].get("phase") == "Running" else None


def pod_annotations(pod: dict[str, Any]) -> dict[str, str]:
    return dict(pod["metadata"].get("annotations") or {})


def pod_events(api: KubeApi, ns: str, name: str) -> list[dict[str, Any]]:
    items = api.get(f"/api/v1/namespaces/{ns}/events")["items"]
    return [e for e in items if e["involvedObject"]["name"] == name]


def events_with(
    api: KubeApi, ns: str, name: str, *reasons: str, timeout_s: float = 30
) -> list[dict[str, Any]]:
    """The pod's events once every reason in `reasons` is among them (all of them at the
    deadline). Controllers write an event after the change it explains (the patch, the
    eviction), so a test that has seen the change must still wait for the event."""

    def seen() -> list[dict[str, Any]] | None:
        events = pod_events(api, ns, name)
        got = {e["reason"] for e in events}
        return events if all(r in got for r in reasons) else None

    return poll_until(seen, timeout_s=timeout_s, interval_s=0.2) or pod_events(api, ns, name)
