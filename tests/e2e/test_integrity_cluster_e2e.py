"""Cluster integrity on a real API server and kube-scheduler (issue 17, cluster half): whole-GPU
pods of the default tenant run; a card takes no more pods than its share count; a deleted GpuLease
of a running pod is made again before another pod can land on its bytes.

One cluster for this module, `gpupool dev-cluster up` with gpupool on top (extender, webhook,
controller, GpuNode heartbeats), on three kwok nodes with ONE A100-80GB each (72Gi allocatable,
10 `gpupool.io/vgpu` per card), so that every test owns a card: gpu-node-0 the share count,
gpu-node-1 the lease restore, gpu-node-2 the whole-GPU pods. Namespaces carry no tenant label
(their pods are the default tenant's) unless a test makes a tenant. Also: the extender, served
over HTTPS, binds only for kube-scheduler's client certificate, re-checks the node against the
pod's selector, and refuses a pod the admission queue never admitted.
"""

from __future__ import annotations

import json
import secrets
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from support.builders import pod_json
from support.scheduler_metrics import unschedulable_attempts
from support.waiting import wait_until

from gpupool.adapters.kubernetes.audit import Audit, read_cluster
from gpupool.devcluster import ClusterSpec, DevCluster, processes
from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.nodes import node_specs, parse_gpu_spec
from gpupool.devcluster.processes import ProcessRecord
from gpupool.devcluster.spec import ClusterState, GpupoolSpec

pytestmark = pytest.mark.e2e

GROUP = "/apis/gpupool.io/v1alpha1"
SPEC = GpupoolSpec(policy="binpack", heartbeat_s=1.0, controller_resync_s=1.0)


@dataclass(frozen=True)
class Cluster:
    cluster: DevCluster
    state: ClusterState
    api: KubeApi

    def namespace(self, tag: str) -> str:
        name = f"{tag}-{secrets.token_hex(3)}"
        self.api.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        )
        return name

    def pod(self, ns: str, name: str) -> dict[str, Any]:
        got: dict[str, Any] = self.api.get(f"/api/v1/namespaces/{ns}/pods/{name}")
        return got

    def create(self, ns: str, body: dict[str, Any]) -> None:
        self.api.create(f"/api/v1/namespaces/{ns}/pods", body)

    def delete_all(self, ns: str) -> None:
        for pod in self.api.get(f"/api/v1/namespaces/{ns}/pods")["items"]:
            name = pod["metadata"]["name"]
            body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
            self.api.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}", body)

    def events(self, ns: str, pod: str) -> list[dict[str, Any]]:
        path = f"/api/v1/namespaces/{ns}/events?fieldSelector=involvedObject.name%3D{pod}"
        items: list[dict[str, Any]] = self.api.get(path)["items"]
        return items

    def audit(self, ns: str) -> Audit:
        return read_cluster(self.api.get, ns)


@pytest.fixture(scope="module")
def one_card_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = DevCluster(tmp_path_factory.mktemp("integrity-cluster") / "cluster")
    spec = ClusterSpec(nodes=tuple(node_specs(3, parse_gpu_spec("1xA100-80GB"))), gpupool=SPEC)
    state = cluster.up(spec, die_with_parent=True)
    try:
        yield Cluster(cluster, state, cluster.api())
    finally:
        cluster.down()


def _running(c: Cluster, ns: str, name: str) -> bool:
    pod = c.pod(ns, name)
    return bool(pod["spec"].get("nodeName")) and pod["status"].get("phase") == "Running"


def _log_tail(c: Cluster) -> str:
    logs = [p for p in c.cluster.logs() if p.name.startswith(("gpupool-extender", "gpupool-con"))]
    return "\n".join(f"--- {p.name}\n" + "\n".join(p.read_text().splitlines()[-30:]) for p in logs)


@pytest.mark.parametrize(
    "limits",
    [{"gpupool.io/gpu": "1"}, {"gpupool.io/gpu-compute": "30"}],
    ids=["gpu-1", "gpu-compute-30"],
)
def test_whole_gpu_pods_of_the_default_tenant_run(
    one_card_nodes: Cluster, limits: dict[str, str]
) -> None:
    c = one_card_nodes
    ns = c.namespace("whole")
    c.create(ns, pod_json("whole", limits=limits, hostname="gpu-node-2", grace_s=0))
    try:
        wait_until(
            lambda: _running(c, ns, "whole"),
            90,
            lambda: f"pod whole running: {[e['message'] for e in c.events(ns, 'whole')][-4:]}",
        )

        def admitted() -> list[str]:
            return [e["message"] for e in c.events(ns, "whole") if e["reason"] == "Admitted"]

        # The controller records the event after it ungates the pod: it may land after Running.
        assert wait_until(admitted, 30, lambda: f"an Admitted event: {admitted()}") == [
            "tenant 'default' has no GpuQuota, so it is not limited"
        ]
        audit = c.audit(ns)
        assert audit.ok, str(audit)
        assert [(node, size) for (node, _), size in audit.leased.items()] == [
            ("gpu-node-2", 72 * 2**30)  # the whole card: what slices may take of it
        ], str(audit)
    finally:  # the card is the next case's: free it even when this one failed
        c.delete_all(ns)
        wait_until(lambda: not c.audit(ns).live_leases, 60, "the whole-GPU pod's lease released")


def test_eleven_1gi_pods_on_a_one_card_node_leave_one_pending_for_the_share_count(
    one_card_nodes: Cluster,
) -> None:
    c = one_card_nodes
    ns = c.namespace("shares")
    names = [f"s{i:02d}" for i in range(11)]
    for name in names:
        c.create(ns, pod_json(name, gpu_memory="1Gi", hostname="gpu-node-0", grace_s=0))

    def settled() -> tuple[list[str], list[str]] | None:
        running = [n for n in names if _running(c, ns, n)]
        refused = [
            n
            for n in names
            if n not in running and any(e["reason"] == "FailedScheduling" for e in c.events(ns, n))
        ]
        return (running, refused) if len(running) == 10 and refused else None

    running, refused = wait_until(settled, 120, lambda: f"10 running, 1 refused\n{_log_tail(c)}")
    [pending] = [n for n in names if n not in running]
    assert refused == [pending]
    messages = [e["message"] for e in c.events(ns, pending) if e["reason"] == "FailedScheduling"]
    assert any("share count" in m for m in messages), messages
    audit = c.audit(ns)
    assert audit.ok, str(audit)
    c.delete_all(ns)
    wait_until(lambda: not c.audit(ns).live_leases, 60, "the 1Gi pods' leases released")


def _lease_path(ns: str, name: str = "") -> str:
    return f"{GROUP}/namespaces/{ns}/gpuleases" + (f"/{name}" if name else "")


def _unschedulable_attempts(c: Cluster) -> float:
    return unschedulable_attempts(c.state.ports["kube-scheduler"])


def _controller(c: Cluster) -> ProcessRecord:
    state = c.cluster.load_state()
    assert state is not None
    [record] = [p for p in state.processes if p.name == "gpupool-controller"]
    return record


def test_a_deleted_lease_is_restored_before_a_56gi_pod_can_land_on_its_bytes(
    one_card_nodes: Cluster,
) -> None:
    """The 56Gi pod is admitted and waits, refused for memory (24 + 56 > 72Gi), when the 24Gi
    pod's lease is deleted, with the controller that makes it again stopped, and kube-scheduler
    tries the 56Gi pod again (a node update wakes its queue): the extender must go on counting
    the running pod's bytes until its lease is back, else the waiting pod lands on them."""
    c = one_card_nodes
    ns = c.namespace("restore")
    c.create(ns, pod_json("small", gpu_memory="24Gi", hostname="gpu-node-1", grace_s=0))
    wait_until(lambda: _running(c, ns, "small"), 90, "the 24Gi pod running")
    uid = c.pod(ns, "small")["metadata"]["uid"]
    c.create(ns, pod_json("big", gpu_memory="56Gi", hostname="gpu-node-1", grace_s=0))

    def refused() -> bool:
        return any(e["reason"] == "FailedScheduling" for e in c.events(ns, "big"))

    wait_until(refused, 60, "kube-scheduler's first refusal of the 56Gi pod")
    # Repeated refusals are one event series whose count kube-scheduler writes back only every
    # 30 minutes: its own count of unschedulable attempts says when it tried again.
    first = _unschedulable_attempts(c)
    processes.stop(_controller(c))
    try:
        c.api.request("DELETE", _lease_path(ns, uid), None)  # an operator's `kubectl delete gl`
        c.api.patch("/api/v1/nodes/gpu-node-1", {"metadata": {"labels": {"e2e-poke": uid[:8]}}})
        wait_until(
            lambda: c.pod(ns, "big")["spec"].get("nodeName") or _unschedulable_attempts(c) > first,
            60,
            "kube-scheduler's next try of the 56Gi pod",
        )
        assert not c.pod(ns, "big")["spec"].get("nodeName"), "the 56Gi pod landed on small's bytes"
    finally:
        c.cluster.restart("gpupool-controller")

    def restored() -> dict[str, Any] | None:
        found: dict[str, Any] | None = c.api.find(_lease_path(ns, uid))
        return found

    lease = wait_until(restored, 60, lambda: f"the lease of small made again\n{_log_tail(c)}")
    assert lease["spec"]["podRef"]["uid"] == uid
    assert [d["sizeBytes"] for d in lease["spec"]["devices"]] == [24 * 2**30]

    # the event is written after the lease it explains: wait for it, do not read it once
    def restored_event() -> list[str] | None:
        reasons = [e["reason"] for e in c.events(ns, "small")]
        return reasons if "LeaseRestored" in reasons else None

    events = wait_until(restored_event, 30, lambda: f"no LeaseRestored event\n{_log_tail(c)}")
    assert "Fenced" not in events, events
    assert not c.pod(ns, "big")["spec"].get("nodeName"), "the 56Gi pod landed on small's bytes"
    audit = c.audit(ns)
    assert not audit.of_kind("overcommit", "offset-overlap", "two-leases"), str(audit)
    assert _running(c, ns, "small")
    c.delete_all(ns)
    wait_until(lambda: not c.audit(ns).live_leases, 60, "the pods' leases released")


def _post_bind(c: Cluster, body: dict[str, Any], who: str | None) -> tuple[int, dict[str, Any]]:
    """POST /bind to the dev cluster's extender over HTTPS, as `who` (a client certificate in the
    cluster's PKI: "scheduler", "admin") or with none."""
    pki = c.cluster.pki_dir
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    if who is not None:
        context.load_cert_chain(str(pki / f"{who}.crt"), str(pki / f"{who}.key"))
    assert c.state.extender_url is not None
    request = urllib.request.Request(
        f"{c.state.extender_url}/bind", data=json.dumps(body).encode(), method="POST"
    )
    request.add_header("Content-Type", "application/json")
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    try:
        with opener.open(request, timeout=30) as resp:
            return int(resp.status), json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return int(err.code), json.loads(err.read())


def test_an_unauthenticated_bind_is_refused_and_so_is_a_node_the_selector_excludes(
    one_card_nodes: Cluster,
) -> None:
    c = one_card_nodes
    ns = c.namespace("bind")
    # Admitted, but held out of kube-scheduler's hands by a gate of the test's own.
    body = pod_json("held", gpu_memory="8Gi", hostname="gpu-node-0", gates=["e2e.gpupool.io/hold"])
    c.create(ns, body)
    pod = wait_until(
        lambda: (lambda p: p if "gpupool.io/admitted" in _annotations(p) else None)(
            c.pod(ns, "held")
        ),
        60,
        "the pod admitted",
    )
    uid = pod["metadata"]["uid"]
    args = {"PodName": "held", "PodNamespace": ns, "PodUID": uid, "Node": "gpu-node-1"}
    status, reply = _post_bind(c, args, None)
    assert status == 403, reply
    assert "answer only system:kube-scheduler" in reply["error"], reply
    assert "no verified client certificate" in reply["error"], reply
    status, reply = _post_bind(c, args, "admin")  # a cluster admin is not kube-scheduler either
    assert status == 403 and "'gpupool-admin'" in reply["error"], reply
    status, reply = _post_bind(c, args, "scheduler")  # kube-scheduler, but a node it excludes
    assert status == 200
    assert reply["Error"] == (
        f"pod {ns}/held may not run on gpu-node-1: the pod's nodeSelector asks for "
        f"kubernetes.io/hostname=gpu-node-0; node gpu-node-1 has kubernetes.io/hostname=gpu-node-1"
    ), reply
    assert not c.pod(ns, "held")["spec"].get("nodeName")
    assert not c.audit(ns).live_leases
    c.delete_all(ns)


def _annotations(pod: dict[str, Any]) -> dict[str, str]:
    return dict(pod["metadata"].get("annotations") or {})


def test_a_pod_without_an_admission_record_is_not_bound_by_the_extender(
    one_card_nodes: Cluster,
) -> None:
    """A tenant whose 1Gi quota never admits its 12Gi pod; the gate removed by someone the
    pod-integrity policy lets through (a cluster admin here): the pod reaches kube-scheduler
    without an admission record, and the extender refuses it on every node."""
    c = one_card_nodes
    tenant = f"team-{secrets.token_hex(3)}"
    c.api.create(
        f"{GROUP}/gpuquotas",
        {"apiVersion": "gpupool.io/v1alpha1", "kind": "GpuQuota",
         "metadata": {"name": tenant}, "spec": {"nominal": "1Gi"}},
    )  # fmt: skip
    ns = f"{tenant}-ns"
    c.api.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": ns, "labels": {"gpupool.io/tenant": tenant}}},
    )  # fmt: skip
    c.create(ns, pod_json("sneak", gpu_memory="12Gi", hostname="gpu-node-0", grace_s=0))

    def queued() -> dict[str, Any] | None:
        pod = c.pod(ns, "sneak")
        return pod if "gpupool.io/queue" in _annotations(pod) else None

    pod = wait_until(queued, 60, "the pod queued over its tenant's quota")
    gates = pod["spec"].get("schedulingGates") or []
    index = [g["name"] for g in gates].index("gpupool.io/quota")
    c.api.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/pods/sneak",
        [{"op": "remove", "path": f"/spec/schedulingGates/{index}"}],
        content_type="application/json-patch+json",
    )

    def refused() -> list[str] | None:
        said = [e["message"] for e in c.events(ns, "sneak") if e["reason"] == "FailedScheduling"]
        return said or None

    said = wait_until(refused, 60, lambda: f"kube-scheduler's refusal\n{_log_tail(c)}")
    assert any("has no valid gpupool.io/admitted record" in m for m in said), said
    assert not c.pod(ns, "sneak")["spec"].get("nodeName")
    assert not c.audit(ns).live_leases
    c.delete_all(ns)
