"""The lease loop decides per lease: a round owed some changes reads by key only the leases they
touch (a changed lease, a changed pod's, a changed GpuNode's, a tenant's whose GpuQuota changed)
and their pods; a lease's or pod's own time brings its round with no change; and over random
histories of pods and leases, rounds over what changed leave the cluster exactly as rounds over
everything do."""

from __future__ import annotations

import asyncio
import copy
import json
import random
from collections.abc import Collection
from typing import Any

from fake_cluster import FakeCluster, GiB, lease_json, pod_json, quota_json

from gpupool.adapters.wire.times import format_time
from gpupool.controllers.leases.reconcile import LeaseReconciler
from gpupool.controllers.leases.restore import RESTORE_GRACE_S
from gpupool.controllers.work_queue import Owed
from gpupool.ports import Json
from gpupool.state.lease import LeaseRecord
from gpupool.state.listed import Listed
from gpupool.state.pods import PodView

NOW = 1_767_225_600.0
NOTHING_CHANGED = Owed(frozenset(), everything=False)


def changed(*keys: tuple[str, str]) -> Owed:
    return Owed(frozenset(keys), everything=False)


class Counting(FakeCluster):
    """Records the keys each read asked for (None: every object)."""

    def __init__(self, **objects: Any) -> None:
        super().__init__(**objects)
        self.lease_reads: list[frozenset[str] | None] = []
        self.pod_reads: list[frozenset[str] | None] = []

    async def leases(
        self, *, fresh: bool = False, keys: Collection[str] | None = None
    ) -> Listed[LeaseRecord]:
        self.lease_reads.append(None if keys is None else frozenset(keys))
        return await super().leases(fresh=fresh, keys=keys)

    async def tenant_pods(
        self, *, fresh: bool = False, keys: Collection[str] | None = None
    ) -> Listed[PodView]:
        self.pod_reads.append(None if keys is None else frozenset(keys))
        return await super().tenant_pods(fresh=fresh, keys=keys)


def allocated(pod: Json, offset_gib: int, gib: int = 4, node: str = "n1") -> Json:
    """`pod` holding `gib` GiB at `offset_gib` of `node`'s card 0 (its allocation annotation)."""
    card = {"index": 0, "uuid": f"GPU-{node}-0", "model": "A100-80GB", "computePercent": 0}
    slices = [{**card, "offsetBytes": offset_gib * GiB, "sizeBytes": gib * GiB}]
    pod["metadata"]["annotations"]["gpupool.io/allocation"] = json.dumps(slices)
    return pod


def bound(pod: Json, at: float) -> Json:
    pod["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": format_time(at)}
    ]
    return pod


def lease_of(pod: Json, offset_gib: int, gib: int = 4, node: str = "n1", **kw: Any) -> Json:
    lease = lease_json(pod, gib=gib, node=node, **kw)
    lease["spec"]["devices"][0]["offsetBytes"] = offset_gib * GiB
    return lease


def _cluster() -> Counting:
    pods = [
        pod_json(f"p{i}", "alpha", 4, node="n1", phase="Pending", admitted_at=NOW - 60)
        for i in range(3)
    ]
    leases = [lease_of(p, 4 * i, start=NOW - 60) for i, p in enumerate(pods)]
    return Counting(pods=pods, leases=leases)


def test_a_round_owed_one_pod_change_reads_that_pod_and_its_lease_alone() -> None:
    cluster = _cluster()
    clock = [NOW]
    leases = LeaseReconciler(cluster, lambda: clock[0])
    asyncio.run(leases.reconcile())  # everything: the first round (the leases go Bound)
    assert cluster.lease_reads == [None] and cluster.pod_reads == [None]
    cluster.pods["ns/p1"]["status"]["phase"] = "Running"
    cluster.writes.clear()
    clock[0] = NOW + 5
    plan = asyncio.run(leases.reconcile(changed(("pods", "ns/p1"))))
    assert cluster.lease_reads[-1] == {"ns/uid-p1"}
    assert cluster.pod_reads[-1] == {"ns/p1"}
    assert [m.lease.key for m in plan.moves] == ["ns/uid-p1"]
    assert [key for key, _ in cluster.written("patch_lease_status")] == ["ns/uid-p1"]
    assert cluster.lease_objects["ns/uid-p1"]["status"]["phase"] == "Active"


def test_a_deleted_pods_lease_is_released_in_a_round_owed_that_pod() -> None:
    cluster = _cluster()
    leases = LeaseReconciler(cluster, lambda: NOW)
    asyncio.run(leases.reconcile())
    del cluster.pods["ns/p2"]
    asyncio.run(leases.reconcile(changed(("pods", "ns/p2"))))
    assert cluster.lease_reads[-1] == {"ns/uid-p2"}
    assert cluster.lease_objects["ns/uid-p2"]["status"]["phase"] == "Released"
    assert cluster.lease_objects["ns/uid-p0"]["status"]["phase"] == "Bound"


def test_a_round_owed_a_quota_change_plans_that_tenants_leases() -> None:
    cluster = _cluster()
    other = pod_json("q", "beta", 4, node="n1", phase="Running", admitted_at=NOW - 60)
    cluster.pods["ns/q"] = other
    cluster.lease_objects["ns/uid-q"] = lease_of(other, 40, phase="Active", start=NOW - 60)
    leases = LeaseReconciler(cluster, lambda: NOW)
    asyncio.run(leases.reconcile())
    cluster.quota_objects["alpha"] = quota_json("alpha", 100, leaseTTLSeconds=3600)
    cluster.writes.clear()
    asyncio.run(leases.reconcile(changed(("gpuquotas", "alpha"))))
    assert cluster.lease_reads[-1] == {"ns/uid-p0", "ns/uid-p1", "ns/uid-p2"}
    assert sorted(k for k, _ in cluster.written("patch_lease_spec")) == [
        "ns/uid-p0", "ns/uid-p1", "ns/uid-p2"
    ]  # fmt: skip


def test_an_expiry_brings_its_leases_round_with_nothing_changed() -> None:
    pod = pod_json("p", "alpha", 4, node="n1", phase="Running", admitted_at=NOW - 60)
    lease = lease_of(pod, 0, phase="Active", start=NOW - 60)
    lease["spec"].update(expiry=format_time(NOW + 600), ttlSeconds=660)
    quiet = pod_json("r", "alpha", 4, node="n1", phase="Running", admitted_at=NOW - 60)
    cluster = Counting(pods=[pod, quiet], leases=[lease, lease_of(quiet, 8, phase="Active")])
    clock = [NOW]
    leases = LeaseReconciler(cluster, lambda: clock[0])
    asyncio.run(leases.reconcile())
    assert leases.due_at() == NOW + 600
    clock[0] = NOW + 600
    asyncio.run(leases.reconcile(NOTHING_CHANGED))
    assert cluster.lease_reads[-1] == {"ns/uid-p"}  # the quiet lease is not read
    notice = cluster.pods["ns/p"]["metadata"]["annotations"].get("gpupool.io/expiry-notice")
    assert (
        notice is not None
        and "gpupool.io/expiry-notice" not in (cluster.pods["ns/r"]["metadata"]["annotations"])
    )


def test_a_bound_pod_whose_lease_never_came_is_restored_at_the_end_of_its_grace() -> None:
    pod = bound(allocated(pod_json("p", "alpha", 4, node="n1", phase="Running",
                                   admitted_at=NOW - 60), 0), NOW - 10)  # fmt: skip
    cluster = Counting(pods=[pod])
    clock = [NOW]
    leases = LeaseReconciler(cluster, lambda: clock[0])
    asyncio.run(leases.reconcile())
    assert cluster.lease_objects == {}  # bound 10 s ago: its lease may be on its way
    assert leases.due_at() == NOW - 10 + RESTORE_GRACE_S
    clock[0] = NOW - 10 + RESTORE_GRACE_S
    asyncio.run(leases.reconcile(NOTHING_CHANGED))
    assert cluster.pod_reads[-1] == {"ns/p"}
    assert [k for k, _ in cluster.written("create_lease")] == ["ns/uid-p"]


def test_a_deleted_lease_of_a_running_pod_is_made_again_in_the_round_owed_the_lease() -> None:
    pod = allocated(pod_json("p", "alpha", 4, node="n1", phase="Running",
                             admitted_at=NOW - 60), 0)  # fmt: skip
    cluster = Counting(pods=[pod], leases=[lease_of(pod, 0, phase="Active", start=NOW - 60)])
    leases = LeaseReconciler(cluster, lambda: NOW)
    asyncio.run(leases.reconcile())
    del cluster.lease_objects["ns/uid-p"]
    asyncio.run(leases.reconcile(changed(("gpuleases", "ns/uid-p"))))
    assert [k for k, _ in cluster.written("create_lease")] == ["ns/uid-p"]


# -- rounds over what changed against rounds over everything, over random histories ----------

KINDS = {"pods": "pods", "lease_objects": "gpuleases", "quota_objects": "gpuquotas"}


def _state(cluster: FakeCluster) -> dict[tuple[str, str], str]:
    out: dict[tuple[str, str], str] = {}
    for attr, kind in KINDS.items():
        for key, obj in getattr(cluster, attr).items():
            if kind == "gpuquotas":  # the loops wake on a quota's spec, not its status
                obj = {"spec": obj.get("spec"), "metadata": obj.get("metadata")}
            out[(kind, key)] = json.dumps(obj, sort_keys=True)
    return out


def _diff(before: dict[tuple[str, str], str], after: dict[tuple[str, str], str]) -> Owed:
    keys = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    return Owed(frozenset(keys), everything=False)


class History:
    """One random history applied alike to two clusters."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.now = NOW
        self.made = 0

    def step(self, clusters: tuple[FakeCluster, FakeCluster]) -> None:
        rng = self.rng
        self.now += rng.choice((0.0, 5.0, 31.0, 90.0, 200.0, 700.0, 3700.0))
        first = clusters[0]
        op = rng.choice(("make", "make", "make", "run", "finish", "delete", "drop-lease",
                         "renew", "unbound", "quota"))  # fmt: skip
        pods = sorted(first.pods)
        pick = rng.choice(pods) if pods else None
        held = (None, "Reserved", "Bound", "Active")
        live = sorted(
            k for k, le in first.lease_objects.items() if le["status"].get("phase") in held
        )
        lease_key = rng.choice(live) if live else None
        tenant = rng.choice(("alpha", "beta"))
        slot = self.made % 16
        self.made += 1
        with_lease = rng.random() < 0.8
        ttl = rng.choice((None, 300, 1200))
        pod_ttl = rng.random() < 0.2
        for cluster in clusters:
            if op in ("make", "unbound"):
                name = f"p{self.made}"
                node = None if op == "unbound" else "n1"
                pod = pod_json(name, tenant, 4, node=node, admitted_at=self.now,
                               created=self.now)  # fmt: skip
                if node is not None:
                    bound(allocated(pod, 4 * slot), self.now)
                if pod_ttl:
                    pod["metadata"]["annotations"]["gpupool.io/lease-ttl"] = "10m"
                cluster.pods[f"ns/{name}"] = pod
                if with_lease:
                    lease = lease_of(pod, 4 * slot, start=self.now)
                    cluster.lease_objects[f"ns/uid-{name}"] = lease
            elif op == "run" and pick is not None and cluster.pods[pick]["spec"].get("nodeName"):
                cluster.pods[pick]["status"]["phase"] = "Running"
            elif op == "finish" and pick is not None:
                cluster.pods[pick]["status"]["phase"] = "Succeeded"
            elif op == "delete" and pick is not None:
                del cluster.pods[pick]
            elif op == "drop-lease" and lease_key is not None:
                del cluster.lease_objects[lease_key]
            elif op == "renew" and pick is not None:
                cluster.pods[pick]["metadata"]["annotations"]["gpupool.io/renew"] = str(self.now)
            elif op == "quota":
                spec: dict[str, Any] = {"reclaimGracePeriodSeconds": 60}
                if ttl is not None:
                    spec["leaseTTLSeconds"] = ttl
                cluster.quota_objects[tenant] = quota_json(tenant, 1000, **spec)


def _settle_whole(reconciler: LeaseReconciler, cluster: FakeCluster) -> None:
    for _ in range(6):
        before = _state(cluster)
        asyncio.run(reconciler.reconcile())
        if _state(cluster) == before:
            return
    raise AssertionError("rounds over everything did not settle")


def _settle_owed(reconciler: LeaseReconciler, cluster: FakeCluster, owed: Owed, now: float) -> None:
    for _ in range(6):
        due = reconciler.due_at()
        if not owed.changed and (due is None or due > now):
            return
        before = _state(cluster)
        asyncio.run(reconciler.reconcile(owed))
        owed = _diff(before, _state(cluster))  # its own writes come back as watched changes
    raise AssertionError("rounds over what changed did not settle")


def test_rounds_over_what_changed_leave_the_cluster_as_rounds_over_everything() -> None:
    for seed in range(12):
        history = History(seed)
        whole, owed = FakeCluster(), FakeCluster()
        clock = [NOW]

        def now(clock: list[float] = clock) -> float:
            return clock[0]

        by_whole = LeaseReconciler(whole, now, retention_s=1800)
        by_key = LeaseReconciler(owed, now, retention_s=1800)
        asyncio.run(by_key.reconcile())  # the first round: everything
        for step in range(60):
            before = _state(owed)
            history.step((whole, owed))
            clock[0] = history.now
            _settle_whole(by_whole, whole)
            _settle_owed(by_key, owed, _diff(before, _state(owed)), history.now)
            assert _state(owed) == _state(whole), f"seed {seed}, step {step}"
            assert owed.events == whole.events, f"seed {seed}, step {step}"
            assert copy.deepcopy(owed.writes) == whole.writes, f"seed {seed}, step {step}"
