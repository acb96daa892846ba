"""Node health decides per node: a round owed some changes (not everything) reads and judges
only the nodes a changed GpuNode or GpuLease names and those whose own deadline came, by name;
a node's deadline alone brings its round; GpuLeases are read whole only when a judged node is
Lost. A round owed everything judges every node (the manager's first round and safety net)."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping

from fake_cluster import FakeCluster, gpu_node_json, lease_json, node_lease_json, pod_json

from gpupool.controllers.node_health.plan import SUSPECT_S
from gpupool.controllers.node_health.reconcile import NodeHealthReconciler
from gpupool.controllers.work_queue import Owed
from gpupool.state.lease import LeaseRecord
from gpupool.state.listed import Listed
from gpupool.state.nodes import GpuNodeObject

NOW = 1_767_225_600.0
NODES = ("n1", "n2", "n3")


class Counting(FakeCluster):
    """Records which GpuNodes each round asked for (None: all) and how often every lease was
    read."""

    def __init__(self) -> None:
        pod = pod_json("p", "alpha", node="n1", phase="Running")
        super().__init__(
            pods=[pod],
            leases=[lease_json(pod, phase="Active", start=NOW - 3600)],
            gpu_nodes=[gpu_node_json(n) for n in NODES],
            node_leases=[node_lease_json(n, renewed=NOW) for n in NODES],
        )
        self.asked: list[frozenset[str] | None] = []
        self.all_leases = 0

    async def gpu_nodes(self, names: Collection[str] | None = None) -> Listed[GpuNodeObject]:
        self.asked.append(None if names is None else frozenset(names))
        return await super().gpu_nodes(names)

    async def leases(
        self, *, fresh: bool = False, keys: Collection[str] | None = None
    ) -> Listed[LeaseRecord]:
        if keys is None:
            self.all_leases += 1
        return await super().leases(fresh=fresh, keys=keys)

    def renew(self, node: str, at: float) -> None:
        self.node_lease_objects[f"gpupool-node-lease/{node}"] = node_lease_json(node, renewed=at)


def changed(*keys: tuple[str, str]) -> Owed:
    return Owed(frozenset(keys), everything=False)


def _health(cluster: FakeCluster) -> Mapping[str, str | None]:
    return {n: cluster.gpu_node_objects[n].get("status", {}).get("health") for n in NODES}


def test_a_round_owed_one_gpunode_change_reads_and_judges_that_node_alone() -> None:
    cluster = Counting()
    clock = [NOW]
    health = NodeHealthReconciler(cluster, lambda: clock[0])
    asyncio.run(health.reconcile())  # everything: the first round
    assert cluster.asked == [None] and health.due_at() == NOW + SUSPECT_S
    clock[0] = NOW + 10
    asyncio.run(health.reconcile(changed(("gpunodes", "n2"))))
    assert cluster.asked[-1] == {"n2"}
    assert cluster.all_leases == 1  # no node is Lost: the leases are not read again
    assert cluster.writes == []


def test_a_nodes_own_deadline_brings_its_round_and_judges_only_it() -> None:
    cluster = Counting()
    clock = [NOW]
    health = NodeHealthReconciler(cluster, lambda: clock[0])
    asyncio.run(health.reconcile())
    cluster.renew("n2", NOW + 50)  # renewals wake nothing; n2's next deadline moves on its
    cluster.renew("n3", NOW + 50)  # next look
    clock[0] = NOW + SUSPECT_S + 1  # every deadline came (all were NOW + 90)
    asyncio.run(health.reconcile(changed()))
    assert cluster.asked[-1] == set(NODES)
    assert _health(cluster)["n1"] == "Suspect" and cluster.writes[0][0] == "patch_gpu_node_status"
    assert health.due_at() == NOW + 50 + SUSPECT_S  # n2 and n3 from their renewal at +50
    clock[0] = NOW + 92  # the write's own watch event brings n1 back
    asyncio.run(health.reconcile(changed(("gpunodes", "n1"))))
    assert cluster.asked[-1] == {"n1"}
    assert health.due_at() == NOW + 97  # Suspect: looked at every few seconds for its return
    asked = len(cluster.asked)
    clock[0] = NOW + 95  # nothing due: the round reads nothing
    asyncio.run(health.reconcile(changed()))
    assert len(cluster.asked) == asked
    clock[0] = NOW + 97
    asyncio.run(health.reconcile(changed()))
    assert cluster.asked[-1] == {"n1"}  # n2 and n3 wait for their deadlines


def test_a_changed_gpulease_brings_its_node_and_a_lost_one_reads_the_leases() -> None:
    cluster = Counting()
    clock = [NOW]
    health = NodeHealthReconciler(cluster, lambda: clock[0])
    asyncio.run(health.reconcile())
    for node in ("n2", "n3"):
        cluster.renew(node, NOW + 170)
    clock[0] = NOW + 200  # n1 silent for 200 s: Lost, when something asks about it
    asyncio.run(health.reconcile(changed(("gpuleases", "ns/uid-p"))))
    assert cluster.asked[-1] == set(NODES)  # n1 by its lease, n2 and n3 by their deadlines
    assert _health(cluster)["n1"] == "Lost" and cluster.pods == {}
    assert cluster.lease_objects["ns/uid-p"]["status"]["phase"] == "Lost"
    assert cluster.all_leases == 2  # read whole once more: a judged node was Lost


def test_a_gpunode_gone_is_forgotten_and_a_round_owed_everything_reads_all() -> None:
    cluster = Counting()
    clock = [NOW]
    health = NodeHealthReconciler(cluster, lambda: clock[0])
    asyncio.run(health.reconcile())
    del cluster.gpu_node_objects["n3"]
    clock[0] = NOW + 10
    asyncio.run(health.reconcile(changed(("gpunodes", "n3"))))
    assert cluster.asked[-1] == {"n3"} and cluster.writes == []
    clock[0] = NOW + SUSPECT_S + 1
    asyncio.run(health.reconcile(changed()))
    assert cluster.asked[-1] == {"n1", "n2"}  # n3's deadline went with it
    asyncio.run(health.reconcile())
    assert cluster.asked[-1] is None
