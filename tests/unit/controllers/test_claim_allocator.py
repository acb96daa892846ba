"""The claim allocator against the in-memory cluster: a claim pod admitted by quota gets its claim
allocated where gpupool's placement core puts it, a GpuLease recording what it consumes, the
extender's pod marks, and only then its gate lifted; a pod whose claim cannot be allocated stays
gated and is told why; a round that stops half-way is finished by the next."""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import uuid
from typing import Any

from fake_cluster import FakeCluster, quota_json

from gpupool.adapters.kubernetes.claim_writes import allocation_status
from gpupool.adapters.kubernetes.decoded import leases_listed, read_gpu_node, read_node
from gpupool.adapters.kubernetes.dra_objects import publishing_nodes, read_claim
from gpupool.adapters.kubernetes.pod_view import read_pod
from gpupool.adapters.wire import names
from gpupool.adapters.wire.claim_request import ClaimAsk, to_annotation
from gpupool.adapters.wire.times import format_time
from gpupool.controllers.admission.reconcile import AdmissionReconciler
from gpupool.controllers.dra.reconcile import ClaimAllocator
from gpupool.domain.units import GiB
from gpupool.placement import Planner
from gpupool.placement.default_workload import default_workload
from gpupool.placement.snapshot import Decision
from gpupool.ports import Json
from gpupool.state.claim_ask import ClaimObject
from gpupool.state.claim_writes import ClaimAllocationWrite
from gpupool.state.cluster import ClusterCache
from gpupool.state.lease import LeaseRecord
from gpupool.state.listed import Listed

NOW = 1_767_225_600.0
ASK = ClaimAsk("gpu", "gpu", 12 * GiB, 30, 1, ("A100-80GB",))


def node(name: str) -> Json:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}  # fmt: skip


def gpunode(name: str, cards: int = 2) -> Json:
    devices = [
        {"index": i, "model": "A100-80GB", "uuid": f"GPU-{name}-{i}",
         "memoryBytes": 80 * GiB, "allocatableBytes": 72 * GiB}
        for i in range(cards)
    ]  # fmt: skip
    status = {"heartbeat": format_time(NOW), "health": "Healthy", "devices": devices}
    return {"metadata": {"name": name}, "status": status}


def resource_slice(name: str) -> Json:
    return {"metadata": {"name": f"{name}-gpu.gpupool.io"},
            "spec": {"driver": "gpu.gpupool.io", "nodeName": name, "pool": {"name": name},
                     "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}]}}  # fmt: skip


def claim_spec(memory: str = "12Gi") -> Json:
    selector = "device.attributes['gpu.gpupool.io'].model == 'A100-80GB'"
    return {"devices": {
        "requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.gpupool.io", "selectors": [{"cel": {"expression": selector}}],
            "capacity": {"requests": {"memory": memory, "compute": "30"}}}}],
        "config": [{"opaque": {"driver": "gpu.gpupool.io", "parameters": {"computeMode": "mps"}}}],
    }}  # fmt: skip


def claim_pod(name: str, *, claim_made: bool = True) -> Json:
    status: Json = {"phase": "Pending"}
    if claim_made:
        status["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}]
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                     "labels": {names.LABEL_TENANT: "alpha"},
                     "annotations": {names.ANN_CLAIM: to_annotation(ASK),
                                     names.ANN_QUEUED_AT: format_time(NOW - 10)}},
        "spec": {"containers": [{"name": "main", "resources": {"claims": [{"name": "gpu"}]}}],
                 "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}],
                 "schedulingGates": [{"name": names.QUOTA_GATE}]},
        "status": status,
    }  # fmt: skip


class ClaimCluster(FakeCluster):
    """The fake cluster with ResourceClaims (status writes as the status subresource takes them,
    with the uid precondition) and ResourceSlices."""

    def __init__(self, claims: list[Json], slices: list[Json], **objects: Any) -> None:
        super().__init__(**objects)
        self.claims = {f"ns/{c['metadata']['name']}": c for c in claims}
        self.slices = slices
        self.node_lists: list[str] = []  # the nodes whose leases were read from the API server

    async def resource_claim(self, namespace: str, name: str) -> ClaimObject | None:
        found = self.claims.get(f"{namespace}/{name}")
        return read_claim(copy.deepcopy(found)) if found is not None else None  # as the adapter

    async def patch_claim_status(self, allocation: ClaimAllocationWrite) -> bool:
        target = allocation.target
        key = f"{target.namespace}/{target.name}"
        status = allocation_status(allocation)  # what the real adapter sends
        self._write("patch_claim_status", key, status)
        claim = self.claims.get(key)
        if claim is None or claim["metadata"]["uid"] != target.uid:
            return False
        claim.setdefault("status", {}).update(copy.deepcopy(status))
        return True

    async def publishing_nodes(self) -> frozenset[str]:
        return publishing_nodes(copy.deepcopy(self.slices))  # the adapter's decoding

    def _on_node(self, node: str) -> list[Json]:
        return [copy.deepcopy(x) for x in self.lease_objects.values() if x["spec"]["node"] == node]

    async def leases_on_node(self, node: str) -> Listed[LeaseRecord]:
        self.node_lists.append(node)
        return leases_listed(self._on_node(node))


def claim(name: str, memory: str = "12Gi") -> Json:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"cuid-{name}"},
            "spec": claim_spec(memory)}  # fmt: skip


def cluster(pods: list[Json], *, publishing: tuple[str, ...] = ("n1", "n2"), quota: int = 80,
            leases: list[Json] = ()) -> ClaimCluster:  # type: ignore[assignment]  # fmt: skip
    return ClaimCluster(
        claims=[claim(f"{p['metadata']['name']}-gpu") for p in pods],
        slices=[resource_slice(n) for n in publishing],
        pods=pods,
        quotas=[quota_json("alpha", quota)],
        nodes=[node("n1"), node("n2")],
        gpu_nodes=[gpunode("n1"), gpunode("n2")],
        leases=list(leases),
    )


def run_round(fake: ClaimCluster, now: float = NOW) -> None:
    allocator = ClaimAllocator(fake)
    asyncio.run(AdmissionReconciler(fake, lambda: now, claims=allocator).reconcile())


def planner_choice(fake: ClaimCluster, pod: Json) -> Decision:
    cache = ClusterCache()
    cache.rebuild([read_node(n) for n in fake.node_objects.values()],
                  [read_gpu_node(g) for g in fake.gpu_node_objects.values()], [])  # fmt: skip
    request = read_pod(pod).request
    assert request is not None
    decision = Planner("gpupool", default_workload()).plan(cache.snapshot(), request)
    assert isinstance(decision, Decision)
    return decision


def test_an_admitted_claim_pod_gets_its_claim_allocated_leased_and_then_ungated() -> None:
    pod = claim_pod("p1")
    fake = cluster([pod])
    chosen = planner_choice(fake, pod)
    run_round(fake)
    status = fake.claims["ns/p1-gpu"]["status"]["allocation"]
    [result] = status["devices"]["results"]
    card = fake.gpu_node_objects[chosen.node]["status"]["devices"][chosen.cards[0]]
    assert (result["pool"], result["device"]) == (chosen.node, f"gpu-{card['index']}")
    assert result["driver"] == "gpu.gpupool.io" and result["request"] == "gpu"
    assert result["consumedCapacity"] == {"memory": str(12 * GiB), "compute": "30", "shares": "1"}
    assert str(uuid.UUID(result["shareID"])) == result["shareID"]
    [term] = status["nodeSelector"]["nodeSelectorTerms"]
    assert term["matchFields"][0]["values"] == [chosen.node]
    # the claim's opaque config goes with the allocation, where the node's plugin reads it
    assert status["devices"]["config"][0]["opaque"]["parameters"] == {"computeMode": "mps"}
    [(key, lease)] = fake.written("create_lease")
    assert key == "ns/uid-p1"
    assert lease["spec"]["node"] == chosen.node and lease["spec"]["amount"] == 12 * GiB
    assert lease["spec"]["devices"][0]["sizeBytes"] == 12 * GiB
    assert (
        lease["spec"]["computeMode"] == "mps" and lease["spec"]["mpsActiveThreadPercentage"] == 30
    )
    after = fake.pods["ns/p1"]
    assert after["spec"]["schedulingGates"] == []
    marks = after["metadata"]["annotations"]
    assert marks[names.ANN_LEASE] == "ns/uid-p1"
    assert json.loads(marks[names.ANN_ALLOCATION])[0]["uuid"] == card["uuid"]
    # the order: lease, claim status, pod marks, and only then the gate
    order = [
        m for m, _, _ in fake.writes if m in ("create_lease", "patch_claim_status", "patch_pod")
    ]
    assert order == ["create_lease", "patch_claim_status", "patch_pod", "patch_pod"]


def test_a_node_without_gpupools_resource_slice_is_never_chosen() -> None:
    pod = claim_pod("p1")
    fake = cluster([pod], publishing=("n2",))
    run_round(fake)
    [result] = fake.claims["ns/p1-gpu"]["status"]["allocation"]["devices"]["results"]
    assert result["pool"] == "n2"


def test_two_claims_in_one_round_do_not_share_bytes_beyond_the_card() -> None:
    fake = cluster([claim_pod("p1"), claim_pod("p2")])
    run_round(fake)
    leases = [lease for _, lease in fake.written("create_lease")]
    assert len(leases) == 2
    by_card: dict[str, list[tuple[int, int]]] = {}
    for lease in leases:
        for d in lease["spec"]["devices"]:
            by_card.setdefault(d["uuid"], []).append((d["offsetBytes"], d["sizeBytes"]))
    for ranges in by_card.values():
        ranges.sort()
        assert all(a + n <= b for (a, n), (b, _) in itertools.pairwise(ranges))


def test_a_claim_not_made_yet_keeps_the_pod_gated_with_the_reason() -> None:
    fake = cluster([claim_pod("p1", claim_made=False)])
    run_round(fake)
    pod = fake.pods["ns/p1"]
    assert pod["spec"]["schedulingGates"] == [{"name": names.QUOTA_GATE}]
    assert "is not made yet" in pod["metadata"]["annotations"][names.ANN_QUEUE]
    assert fake.written("create_lease") == []


def test_no_room_keeps_the_pod_gated_and_says_so_once() -> None:
    fake = cluster([claim_pod("p1")], publishing=())
    run_round(fake)
    assert fake.pods["ns/p1"]["spec"]["schedulingGates"] == [{"name": names.QUOTA_GATE}]
    assert [r for _, r, _ in fake.events] == ["NoRoom"]
    assert fake.written("create_lease") == [] and fake.written("patch_claim_status") == []
    run_round(fake)
    assert [r for _, r, _ in fake.events] == ["NoRoom"]  # the same note: no second event


def test_a_claim_changed_since_admission_is_refused() -> None:
    fake = cluster([claim_pod("p1")])
    fake.claims["ns/p1-gpu"]["spec"] = claim_spec("40Gi")
    run_round(fake)
    assert [r for _, r, _ in fake.events] == ["ClaimRefused"]
    assert "delete the pod and create it again" in fake.events[0][2]
    assert fake.written("create_lease") == []


def test_a_round_stopped_after_the_lease_is_finished_by_the_next_with_the_same_lease() -> None:
    fake = cluster([claim_pod("p1")])
    fake.fail_next("patch_claim_status")
    run_round(fake)
    assert fake.pods["ns/p1"]["spec"]["schedulingGates"] != []
    assert "allocation" not in fake.claims["ns/p1-gpu"].get("status", {})
    run_round(fake, NOW + 600)  # past the set-aside pod's backoff
    assert len(fake.written("create_lease")) == 1
    [result] = fake.claims["ns/p1-gpu"]["status"]["allocation"]["devices"]["results"]
    lease = fake.lease_objects["ns/uid-p1"]
    assert result["pool"] == lease["spec"]["node"]
    assert fake.pods["ns/p1"]["spec"]["schedulingGates"] == []


def test_over_quota_a_second_claim_pod_waits_gated_with_its_position() -> None:
    fake = cluster([claim_pod("p1"), claim_pod("p2")], quota=12)
    run_round(fake)
    assert fake.pods["ns/p1"]["spec"]["schedulingGates"] == []
    p2 = fake.pods["ns/p2"]
    assert p2["spec"]["schedulingGates"] == [{"name": names.QUOTA_GATE}]
    assert "position 1 of 1" in p2["metadata"]["annotations"][names.ANN_QUEUE]
    assert len(fake.written("create_lease")) == 1


OTHER_PATH = {"type": "OtherGpuPath", "status": "True", "reason": "OtherDevicePlugin",
              "message": "another path hands out the GPUs of node n1: device plugin resource "
                         "nvidia.com/gpu (8 on the Node)"}  # fmt: skip


def test_a_node_another_path_serves_is_never_chosen_for_a_claim() -> None:
    pod = claim_pod("p1")
    fake = cluster([pod])
    fake.gpu_node_objects["n1"]["status"]["conditions"] = [OTHER_PATH]
    run_round(fake)
    [result] = fake.claims["ns/p1-gpu"]["status"]["allocation"]["devices"]["results"]
    assert result["pool"] == "n2"


def test_with_every_node_served_by_another_path_the_claim_waits_naming_it() -> None:
    pod = claim_pod("p1")
    fake = cluster([pod])
    for name in ("n1", "n2"):
        fake.gpu_node_objects[name]["status"]["conditions"] = [OTHER_PATH]
    run_round(fake)
    assert "allocation" not in (fake.claims["ns/p1-gpu"].get("status") or {})
    after = fake.pods["ns/p1"]
    assert after["spec"]["schedulingGates"] == [{"name": names.QUOTA_GATE}]
    note = after["metadata"]["annotations"][names.ANN_QUEUE]
    assert "2 served by another GPU path too" in note, note


def _ranges(leases: list[Json]) -> dict[str, list[tuple[int, int]]]:
    by_card: dict[str, list[tuple[int, int]]] = {}
    for lease in leases:
        for d in lease["spec"]["devices"]:
            by_card.setdefault(d["uuid"], []).append((d["offsetBytes"], d["sizeBytes"]))
    return by_card


def _disjoint(by_card: dict[str, list[tuple[int, int]]]) -> bool:
    return all(
        a + n <= b
        for ranges in by_card.values()
        for (a, n), (b, _) in itertools.pairwise(sorted(ranges))
    )


def _first_lease() -> Json:
    """The lease gpupool's placement gives a first claim pod on n1 (where a second would go too)."""
    first = cluster([claim_pod("p0")], publishing=("n1",))
    run_round(first)
    return copy.deepcopy(first.lease_objects["ns/uid-p0"])


class LaggingCache(ClaimCluster):
    """The watch cache has not heard of `unheard` yet; the API server's consistent read has."""

    def __init__(self, unheard: Json, **kw: Any) -> None:
        super().__init__(**kw)
        self.unheard = unheard

    def _on_node(self, node: str) -> list[Json]:
        listed = super()._on_node(node)
        return listed + (
            [copy.deepcopy(self.unheard)] if self.unheard["spec"]["node"] == node else []
        )


def test_a_lease_the_extender_made_since_the_cache_heard_is_planned_around() -> None:
    theirs = _first_lease()  # the extender leased these bytes a moment ago
    base = cluster([claim_pod("p1")], publishing=("n1",))
    fake = LaggingCache(theirs, claims=list(base.claims.values()), slices=base.slices,
                        pods=list(base.pods.values()), quotas=list(base.quota_objects.values()),
                        nodes=list(base.node_objects.values()),
                        gpu_nodes=list(base.gpu_node_objects.values()), leases=[])  # fmt: skip
    run_round(fake)
    [(_, mine)] = fake.written("create_lease")
    assert fake.node_lists and set(fake.node_lists) == {"n1"}  # read before the lease was made
    same_card = _ranges([theirs, mine])
    assert any(len(r) == 2 for r in same_card.values())  # packed beside it, not over it
    assert _disjoint(same_card)


def test_bytes_a_bound_pod_holds_before_its_lease_is_written_are_not_reused() -> None:
    first = cluster([claim_pod("p0")], publishing=("n1",))
    run_round(first)
    bound = copy.deepcopy(first.pods["ns/p0"])
    held = first.lease_objects["ns/uid-p0"]
    bound["spec"]["nodeName"] = held["spec"]["node"]  # bound; its lease trails the Binding
    bound["status"]["phase"] = "Running"
    fake = cluster([bound, claim_pod("p1")], publishing=("n1",))  # no lease for p0 anywhere
    run_round(fake)
    [(_, mine)] = fake.written("create_lease")
    assert _disjoint(_ranges([held, mine]))
