"""Chaos: SIGKILL and restart the extender, the controller and the webhook at random moments, delete
random GpuLeases of running pods (an operator's `kubectl delete gl`) and restart the API server
once, while 200 GPU pods churn through the real kube-scheduler; afterwards the allocation
invariants hold.

One cluster for this module (2 kwok nodes × 8 A100-80GB, GpuNodes with 72Gi allocatable per card,
kube-scheduler configured with the extender). The three gpupool components run as processes, as a
user starts them, and are killed with SIGKILL (no clean shutdown) and started again after a random
pause. Everything random comes from one seed (`GPUPOOL_CHAOS_SEED`, printed on failure); the
interleaving with the processes is of course not reproducible, the schedule is.

What is checked, with `gpupool.adapters.kubernetes.audit`:
- during the churn, at every kill: never a card's live leases over its memory or compute (a double
  booking), never two live leases for one pod, never two live leases' logical extents sharing a
  byte of a card or reaching past it (bind lays a slice out in the free ranges, several when the
  card's free bytes are fragmented);
- after the churn, with every component running again: every pod left is bound and running, no
  violation (each bound pod's allocation annotation equals its lease, per card the annotations'
  bytes equal the leases' bytes, no lease without its pod, no reservation unbound, no card over,
  no overlapping extents, every running pod with exactly one live lease);
- the deleted leases were made again by the controller (`LeaseRestored` events) and no pod had to
  be fenced (`Fenced`: its bytes were given to another pod before its lease came back);
- after deleting every pod: no live lease is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from support.builders import pod_json

from gpupool.adapters.kubernetes.audit import Audit, read_cluster
from gpupool.devcluster import processes
from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.cluster import DevCluster
from gpupool.devcluster.errors import ApiError
from gpupool.devcluster.nodes import node_specs, parse_gpu_spec
from gpupool.devcluster.polling import poll_until
from gpupool.devcluster.ports import free_port
from gpupool.devcluster.processes import ProcessRecord
from gpupool.devcluster.scheduler_config import ExtenderConfig
from gpupool.devcluster.spec import ClusterSpec
from gpupool.domain.units import GiB

pytestmark = pytest.mark.e2e

GROUP = "/apis/gpupool.io/v1alpha1"
SEED = int(os.environ.get("GPUPOOL_CHAOS_SEED", "5"))
PODS = 200  # created over the churn
LIVE_TARGET = 40  # pods alive at once, about
KEEP = 20  # pods left after the churn: they fit the 16 cards however they fragmented
NODES = 2
CARDS = 8
NEVER = ("overcommit", "two-leases", "malformed-lease", "offset-overlap", "offset-beyond-card")


def _gpupool() -> str:
    return str(Path(sys.executable).parent / "gpupool")


@dataclass
class Component:
    """One gpupool process that the test kills and starts again."""

    name: str
    argv: list[str]
    log: Path
    record: ProcessRecord | None = None
    starts: int = 0
    kills: int = 0

    def start(self) -> None:
        env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost"}
        self.record = processes.start(self.name, self.argv, self.log, env=env, die_with_parent=True)
        self.starts += 1

    def running(self) -> bool:
        return self.record is not None and processes.is_running(self.record)

    def kill(self) -> None:
        assert self.record is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.record.pid, signal.SIGKILL)
        poll_until(lambda: not self.running(), timeout_s=10, interval_s=0.02)
        self.kills += 1

    def stop(self) -> None:
        if self.record is not None:
            processes.stop(self.record, grace_s=5)


@dataclass
class Chaos:
    cluster: DevCluster
    api: KubeApi
    namespace: str
    extender: Component
    controller: Component
    webhook: Component
    health_url: str
    logs: Path
    components: dict[str, Component] = field(init=False)

    def __post_init__(self) -> None:
        self.components = {c.name: c for c in (self.extender, self.controller, self.webhook)}

    def log_tails(self, lines: int = 40) -> str:
        return "\n".join(
            f"--- {c.name} ---\n{processes.tail(c.log, lines)}" for c in self.components.values()
        )


def _healthy(url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _unbound(pod: dict[str, Any]) -> bool:
    """Waiting for a node: not bound, not being deleted."""
    meta, spec = pod["metadata"], pod["spec"]
    return not spec.get("nodeName") and not meta.get("deletionTimestamp")


def _gpunode(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "gpupool.io/v1alpha1",
        "kind": "GpuNode",
        "metadata": {"name": name},
        "spec": {},
    }


def _gpunode_status(name: str) -> dict[str, Any]:
    return {
        "gpuCount": CARDS,
        "health": "Healthy",
        "devices": [
            {
                "uuid": f"GPU-{name}-{i}",
                "index": i,
                "model": "A100-80GB",
                "memoryBytes": 80 * GiB,
                "allocatableBytes": 72 * GiB,
            }
            for i in range(CARDS)
        ],
    }


@pytest.fixture(scope="module")
def chaos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chaos]:
    root = tmp_path_factory.mktemp("chaos-e2e")
    ext_port, hook_port = free_port(), free_port()
    cluster = DevCluster(root / "cluster")
    state = cluster.up(
        ClusterSpec(
            nodes=tuple(node_specs(NODES, parse_gpu_spec(f"{CARDS}xA100-80GB"))),
            extender=ExtenderConfig(url_prefix=f"http://127.0.0.1:{ext_port}/gpupool"),
        ),
        die_with_parent=True,
    )
    api = cluster.api()
    kubeconfig = state.kubeconfig
    gpupool = _gpupool()
    label = ("gpupool.io/e2e-chaos", f"{SEED}")
    extender = Component(
        "extender",
        [gpupool, "extender", "--kubeconfig", kubeconfig, "--port", str(ext_port),
         "--policy", "binpack", "--apply-crds", "--resync-seconds", "20"],
        root / "extender.log",
    )  # fmt: skip
    controller = Component(
        "controller",
        [gpupool, "controller", "--kubeconfig", kubeconfig, "--resync", "2",
         "--lease-retention", "600"],
        root / "controller.log",
    )  # fmt: skip
    webhook = Component(
        "webhook",
        [gpupool, "webhook", "serve", "--host", "127.0.0.1", "--port", str(hook_port),
         "--cert-dir", str(root / "certs"), "--kubeconfig", kubeconfig,
         "--register-url", f"https://127.0.0.1:{hook_port}",
         "--namespace-label", f"{label[0]}={label[1]}", "--name", "gpupool-chaos"],
        root / "webhook.log",
    )  # fmt: skip
    health = f"http://127.0.0.1:{ext_port}/healthz"
    try:
        extender.start()
        assert poll_until(lambda: _healthy(health), timeout_s=90), processes.tail(extender.log)
        for spec in state.nodes:
            obj = api.create(f"{GROUP}/gpunodes", _gpunode(spec))
            obj["status"] = _gpunode_status(spec)
            api.request("PUT", f"{GROUP}/gpunodes/{spec}/status", obj)
        controller.start()
        webhook.start()
        hook = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/gpupool-chaos"
        assert poll_until(lambda: api.exists(hook), timeout_s=60), processes.tail(webhook.log)
        ns = f"chaos-{SEED}"
        api.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": ns, "labels": {label[0]: label[1]}}},
        )  # fmt: skip
        yield Chaos(cluster, api, ns, extender, controller, webhook, health, root)
    finally:
        for c in (webhook, controller, extender):
            c.stop()
        cluster.down()


def _pod(name: str, rng: random.Random) -> dict[str, Any]:
    limits = {"gpupool.io/gpu-memory": f"{rng.choice((4, 8, 8, 12, 12, 16, 24, 40))}Gi"}
    roll = rng.random()
    if roll < 0.1:
        limits["gpupool.io/gpu"] = "2"
    elif roll < 0.3:
        limits["gpupool.io/gpu-compute"] = str(rng.choice((20, 30, 50)))
    return pod_json(name, limits=limits, grace_s=1)


def _audit(chaos: Chaos) -> Audit:
    return read_cluster(chaos.api.get, chaos.namespace)


def _pods(chaos: Chaos) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = chaos.api.get(f"/api/v1/namespaces/{chaos.namespace}/pods")[
        "items"
    ]
    return items


def _api_ready(api: KubeApi) -> bool:
    try:
        return api.get("/readyz") == "ok"
    except (ApiError, OSError):
        return False


def _delete_a_lease(chaos: Chaos, rng: random.Random) -> str | None:
    """Delete the GpuLease of a random running pod, as an operator's `kubectl delete gl` would."""
    leases_path = f"{GROUP}/namespaces/{chaos.namespace}/gpuleases"
    running = {
        p["metadata"]["uid"]
        for p in _pods(chaos)
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    }
    names = sorted(le["metadata"]["name"] for le in chaos.api.get(leases_path)["items"])
    held = [n for n in names if n in running]
    if not held:
        return None
    name = rng.choice(held)
    try:
        chaos.api.request("DELETE", f"{leases_path}/{name}", None)
    except ApiError:
        return None
    return name


def _events(chaos: Chaos, reason: str) -> list[str]:
    path = f"/api/v1/namespaces/{chaos.namespace}/events?fieldSelector=reason%3D{reason}"
    return [str(e.get("message")) for e in chaos.api.get(path)["items"]]


def test_kill_and_restart_components_while_200_pods_churn(chaos: Chaos) -> None:
    rng = random.Random(SEED)
    api, ns = chaos.api, chaos.namespace
    pods_path = f"/api/v1/namespaces/{ns}/pods"
    restart_apiserver_after = PODS // 2  # pods created before the one API server restart
    live: list[str] = []
    stats: Counter[str] = Counter()
    seen: list[str] = []  # violations of the NEVER kinds, as found during the churn
    created = 0
    now = time.monotonic()
    next_kill = now + rng.uniform(1.0, 3.0)
    restart_at: dict[str, float] = {}
    victims: list[str] = []
    deadline = now + 240  # the churn stops here even if creates keep being refused

    def check_never() -> None:
        try:
            result = _audit(chaos)
        except ApiError:
            return
        stats["audits"] += 1
        seen.extend(str(v) for v in result.of_kind(*NEVER))

    while created < PODS and time.monotonic() < deadline:
        if created >= restart_apiserver_after and not stats["apiserver restarts"]:
            chaos.cluster.restart("kube-apiserver")
            stats["apiserver restarts"] += 1
            assert poll_until(lambda: _api_ready(api), timeout_s=60, interval_s=0.2)
        if rng.random() < 0.04:  # about one lease deleted for every 25 steps of the churn
            with contextlib.suppress(ApiError, OSError):
                if _delete_a_lease(chaos, rng) is not None:
                    stats["leases deleted"] += 1
        t = time.monotonic()
        for name, at in list(restart_at.items()):
            if t >= at:
                chaos.components[name].start()
                del restart_at[name]
        if t >= next_kill:
            if not victims:
                victims = rng.sample(sorted(chaos.components), k=len(chaos.components))
            name = victims.pop()
            if name not in restart_at:
                chaos.components[name].kill()
                restart_at[name] = t + rng.uniform(0.0, 3.0)
                check_never()
            next_kill = t + rng.uniform(1.5, 5.0)
        want_create = len(live) < LIVE_TARGET * rng.uniform(0.6, 1.4)
        if want_create:
            name = f"p{created:03d}"
            try:
                api.create(pods_path, _pod(name, rng))
                live.append(name)
                created += 1
                stats["created"] += 1
            except ApiError as err:
                stats[f"create refused {err.status}"] += 1
        elif live:
            name = live.pop(rng.randrange(len(live)))
            body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
            if rng.random() < 0.5:
                body["gracePeriodSeconds"] = 0  # gone at once, as a force delete
            try:
                api.request("DELETE", f"{pods_path}/{name}", body)
                stats["deleted"] += 1
            except ApiError as err:
                stats[f"delete failed {err.status}"] += 1
        time.sleep(rng.uniform(0.02, 0.25))  # the arrivals' seeded pace, not a wait for an outcome

    for name, component in chaos.components.items():
        if not component.running():
            component.start()
            restart_at.pop(name, None)
    summary = {
        "seed": SEED,
        **stats,
        **{f"{c.name} kills": c.kills for c in chaos.components.values()},
    }
    print(json.dumps(summary))
    assert created == PODS, f"only {created} pods created in the churn: {summary}"
    assert all(c.kills > 0 for c in chaos.components.values()), summary
    assert stats["leases deleted"] > 0 and stats["apiserver restarts"] == 1, summary
    assert not seen, "double booking or overlapping extents during the churn:\n" + "\n".join(
        dict.fromkeys(seen)
    )
    assert poll_until(lambda: _healthy(chaos.health_url), timeout_s=90), chaos.log_tails()

    # Leave room for every pod that is left (the deletions also wake kube-scheduler's queue):
    # a pod still pending after that is stuck, not short of capacity.
    left = [
        p["metadata"]["name"] for p in _pods(chaos) if not p["metadata"].get("deletionTimestamp")
    ]
    for name in rng.sample(left, k=max(0, len(left) - KEEP)):
        api.request("DELETE", f"{pods_path}/{name}", None)

    # Converge: every pod left is bound and running with its lease, nothing else holds a card.
    def converged() -> Audit | None:
        result = _audit(chaos)
        pods = _pods(chaos)
        settled = all(
            p["spec"].get("nodeName") and p["status"].get("phase") == "Running"
            for p in pods
            if not p["metadata"].get("deletionTimestamp")
        )
        return result if not result.violations and settled else None

    final = poll_until(converged, timeout_s=150, interval_s=1.0)
    if final is None:
        result = _audit(chaos)
        pending: list[Any] = [
            (p["metadata"]["name"], p["status"].get("phase"), p["spec"].get("schedulingGates"),
             [e["message"] for e in api.get(f"/api/v1/namespaces/{ns}/events?fieldSelector="
                                            f"involvedObject.name%3D{p['metadata']['name']}")
              ["items"]][-3:])
            for p in _pods(chaos)
            if not (p["spec"].get("nodeName") and p["status"].get("phase") == "Running")
        ]  # fmt: skip
        pytest.fail(
            f"not converged (seed {SEED}): {result}\npods not running: {pending}\n"
            f"{chaos.log_tails()}"
        )
    assert final.bound_pods == final.live_leases > 0, str(final)
    print(f"converged: {final.live_leases} leases")
    assert sum(final.leased.values()) == sum(final.annotated.values())
    restored, fenced = _events(chaos, "LeaseRestored"), _events(chaos, "Fenced")
    print(json.dumps({"leases restored": len(restored), "pods fenced": len(fenced)}))
    assert restored, f"{stats['leases deleted']} leases deleted, none made again"
    assert not fenced, "pods fenced, their bytes given away before their lease came back:\n" + (
        "\n".join(fenced)
    )

    # Every pod goes: every lease is released, none is left holding a card.
    for pod in _pods(chaos):
        api.request("DELETE", f"{pods_path}/{pod['metadata']['name']}", None)
    drained = poll_until(
        lambda: (
            lambda r: r if not r.violations and not r.live_leases and not _pods(chaos) else None
        )(_audit(chaos)),
        timeout_s=90,
        interval_s=1.0,
    )
    assert drained is not None, f"leases left after every pod went: {_audit(chaos)}"


def test_reservation_left_by_a_bind_killed_before_the_binding_does_not_strand_the_pod(
    chaos: Chaos,
) -> None:
    """The state a SIGKILL between the lease create and the Binding leaves: the pod's Reserved
    lease on one node, the pod unbound. When kube-scheduler then binds the pod to another node
    (here its nodeSelector allows only that one), the pod must land and the old reservation must
    not keep its card: otherwise the pod waits forever and the card stays held."""
    for component in chaos.components.values():
        if not component.running():
            component.start()
    assert poll_until(lambda: _healthy(chaos.health_url), timeout_s=90), chaos.log_tails()
    api = chaos.api
    ns = f"stale-{SEED}"
    api.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
    )
    held = pod_json(
        "held", gpu_memory="12Gi", vgpu=1, hostname="gpu-node-1", gates=["e2e.gpupool.io/hold"]
    )
    pod = api.create(f"/api/v1/namespaces/{ns}/pods", held)
    uid = pod["metadata"]["uid"]
    api.create(
        f"{GROUP}/namespaces/{ns}/gpuleases",
        {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": "GpuLease",
            "metadata": {"name": uid, "labels": {"gpupool.io/node": "gpu-node-0"}},
            "spec": {
                "tenant": "default",
                "podRef": {"namespace": ns, "name": "held", "uid": uid},
                "node": "gpu-node-0",
                "devices": [{"uuid": "GPU-gpu-node-0-7", "index": 7, "model": "A100-80GB",
                             "offsetBytes": 0, "sizeBytes": 12 * GiB}],
                "amount": 12 * GiB,
            },
        },
    )  # fmt: skip
    assert not read_cluster(api.get, ns).ok  # the reservation of an unbound pod is flagged
    pod = api.get(f"/api/v1/namespaces/{ns}/pods/held")
    pod["spec"]["schedulingGates"] = []
    api.request("PUT", f"/api/v1/namespaces/{ns}/pods/held", pod)

    def landed() -> dict[str, Any] | None:
        got: dict[str, Any] = api.get(f"/api/v1/namespaces/{ns}/pods/held")
        return got if got["status"].get("phase") == "Running" else None

    running = poll_until(landed, timeout_s=60, interval_s=0.5)
    events = api.get(f"/api/v1/namespaces/{ns}/events")["items"]
    assert running is not None, [e["message"] for e in events][-5:]
    assert running["spec"]["nodeName"] == "gpu-node-1"
    result = poll_until(
        lambda: (lambda r: r if r.ok else None)(read_cluster(api.get, ns)), timeout_s=30
    )
    assert result is not None, str(read_cluster(api.get, ns))
    assert {node for node, _ in result.leased} == {"gpu-node-1"}, str(result)
    assert sum(result.leased.values()) == 12 * GiB


def test_a_pod_refused_before_a_release_lands_once_the_lease_is_released(chaos: Chaos) -> None:
    """kube-scheduler retries a refused pod on the cluster events it watches (pods, nodes), not
    on GpuLeases. A 2-GPU pod refused on a full node, and again while the controller is down
    after the pod whose lease holds two cards is deleted: when the controller comes back and
    releases that lease, nothing kube-scheduler watches changes. The extender's requeue must send
    the pod back to the queue (without it the pod waited for the queue's 5-minute flush: the
    chaos test's stuck pods)."""
    for component in chaos.components.values():
        if not component.running():
            component.start()
    assert poll_until(lambda: _healthy(chaos.health_url), timeout_s=90), chaos.log_tails()
    api = chaos.api
    ns = f"requeue-{SEED}"
    api.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": ns, "labels": {"gpupool.io/e2e-chaos": f"{SEED}"}}},
    )  # fmt: skip
    path = f"/api/v1/namespaces/{ns}/pods"
    limits = {"gpupool.io/gpu": "2"}  # two whole cards (with gpu-memory: a slice on each)

    def pod(name: str) -> dict[str, Any]:
        return pod_json(name, limits=limits, hostname="gpu-node-0", grace_s=0)

    def running(name: str) -> bool:
        got = api.get(f"{path}/{name}")
        return bool(got["spec"].get("nodeName")) and got["status"].get("phase") == "Running"

    pairs = CARDS // 2  # gpu-node-0 full (the other tests leave pods on gpu-node-1 only)
    for i in range(pairs):
        api.create(path, pod(f"full-{i}"))
    assert poll_until(lambda: all(running(f"full-{i}") for i in range(pairs)), timeout_s=60)
    api.create(path, pod("waiter"))

    def refused() -> bool:
        events = api.get(f"/api/v1/namespaces/{ns}/events")["items"]
        return any("whole free" in e.get("message", "") for e in events)

    assert poll_until(refused, timeout_s=30, interval_s=0.5), "the waiter was never refused"
    chaos.controller.kill()
    api.request(
        "DELETE", f"{path}/full-0", {"apiVersion": "v1", "kind": "DeleteOptions",
                                     "gracePeriodSeconds": 0},
    )  # fmt: skip
    # kube-scheduler does not try the waiter again on this delete (no filter call follows it
    # within a minute; the other node refused it by its node selector, which a pod's delete
    # cannot change), and full-0's lease still holds its cards while the controller that
    # releases it is down: the extender's requeue, once the lease is released, is what is due
    # to send the waiter back. No wait here: nothing is due to happen.
    assert _unbound(api.get(f"{path}/waiter")), "the waiter landed before the lease was released"
    chaos.controller.start()
    landed = poll_until(lambda: running("waiter"), timeout_s=45, interval_s=0.5)
    events = api.get(f"/api/v1/namespaces/{ns}/events?fieldSelector=involvedObject.name%3Dwaiter")
    assert landed, ([e["message"] for e in events["items"]][-3:], str(read_cluster(api.get, ns)))
    # Landed well inside the queue's 5-minute flush. Most runs it is the extender's requeue that
    # sent it back (`gpupool.io/requeue` on the pod); once in a while kube-scheduler retries the
    # waiter on its own (seen once in CI here: probably an event during its last attempt, which
    # puts a pod in backoff rather than among the unschedulable ones) and that retry, after the
    # release, lands it first. Both are fine for the user; which pods the requeue annotates,
    # and when, is tests/unit/kubernetes/test_extender_requeue.py.
    for i in range(1, pairs):
        api.request("DELETE", f"{path}/full-{i}", None)
    api.request("DELETE", f"{path}/waiter", None)
