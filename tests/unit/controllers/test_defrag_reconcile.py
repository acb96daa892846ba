"""The defragmentation loop against the in-memory cluster: a round marks the fragmented card,
notices its pods (lowest priority first, the room named for the waiting large pod), evicts them
after the buffer time through the Eviction API, records the room hold on their leases, and
releases the mark once the card holds nothing; bad settings give a condition and move nothing.

The cluster: nodes n1, n2 with one A100-80GB each (72Gi allocatable). a1, a2 (8Gi, priority 1)
run on n1, b1, b2 (8Gi, priority 5) on n2; L (72Gi, a whole card) is admitted and waits,
Unschedulable: it fits on neither card, but on n1 once a1 and a2 move to n2.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from fake_cluster import FakeCluster, GiB, pod_json

from gpupool.adapters.wire.defrag_mark import parse_mark
from gpupool.adapters.wire.reclaim_notice import parse_notice
from gpupool.adapters.wire.times import format_time
from gpupool.controllers.defrag.reconcile import DefragReconciler

T0 = 1_800_000_000.0
NOTICE = "gpupool.io/defrag-notice"
MARK = "gpupool.io/defrag"


def owned(pod: dict[str, Any], priority: int, *, owner: bool = True) -> dict[str, Any]:
    pod["spec"]["priority"] = priority
    pod["status"]["phase"] = "Running"
    if owner:
        pod["metadata"]["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-uid",
             "controller": True}
        ]  # fmt: skip
    return pod


def lease_for(pod: dict[str, Any], offset_gib: int, gib: int = 8) -> dict[str, Any]:
    meta, node = pod["metadata"], pod["spec"]["nodeName"]
    return {
        "metadata": {"name": meta["uid"], "namespace": meta["namespace"]},
        "spec": {
            "tenant": meta["labels"]["gpupool.io/tenant"],
            "podRef": {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]},
            "node": node,
            "devices": [{"index": 0, "uuid": f"GPU-{node}-0", "model": "A100-80GB",
                         "offsetBytes": offset_gib * GiB, "sizeBytes": gib * GiB}],
            "amount": gib * GiB,
            "borrowed": 0,
        },
        "status": {"phase": "Active", "start": format_time(T0 - 100)},
    }  # fmt: skip


def node_json(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}  # fmt: skip


def gpunode_json(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {"health": "Healthy",
                   "devices": [{"index": 0, "model": "A100-80GB", "uuid": f"GPU-{name}-0",
                                "memoryBytes": 80 * GiB, "allocatableBytes": 72 * GiB}]},
    }  # fmt: skip


def pool_json(**defrag: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"defragThresholdPercent": defrag.pop("threshold", 10)}
    spec["defrag"] = {"enabled": True, "noticeSeconds": 30, "timeoutSeconds": 600, **defrag}
    return {"apiVersion": "gpupool.io/v1alpha1", "kind": "GpuPool",
            "metadata": {"name": "default", "generation": 1}, "spec": spec,
            "status": {}}  # fmt: skip


def cluster(pool: dict[str, Any] | None = None, *, budgets: list[Any] | None = None,
            a_owner: bool = True, exclusive_a1: bool = False) -> FakeCluster:  # fmt: skip
    admitted = T0 - 200
    pods = [
        owned(pod_json("a1", "t", 8, node="n1", admitted_at=admitted), 1, owner=a_owner),
        owned(pod_json("a2", "t", 8, node="n1", admitted_at=admitted), 1, owner=a_owner),
        owned(pod_json("b1", "t", 8, node="n2", admitted_at=admitted), 5),
        owned(pod_json("b2", "t", 8, node="n2", admitted_at=admitted), 5),
    ]
    pods[2]["metadata"]["labels"]["app"] = "b"
    pods[3]["metadata"]["labels"]["app"] = "b"
    if exclusive_a1:
        pods[0]["metadata"]["annotations"]["gpupool.io/exclusive"] = "true"
    large = pod_json("large", "t", 72, admitted_at=T0 - 50)
    large["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    ]
    leases = [lease_for(pods[0], 0), lease_for(pods[1], 8), lease_for(pods[2], 0),
              lease_for(pods[3], 8)]  # fmt: skip
    return FakeCluster(
        pods=[*pods, large],
        leases=leases,
        nodes=[node_json("n1"), node_json("n2")],
        gpu_nodes=[gpunode_json("n1"), gpunode_json("n2")],
        pools=[pool if pool is not None else pool_json()],
        budgets=budgets or [],
    )


def run(api: FakeCluster, now: float) -> Any:
    return asyncio.run(DefragReconciler(api, lambda: now).reconcile())


def annotations(api: FakeCluster, key: str) -> dict[str, Any]:
    return api.pods[key]["metadata"].get("annotations") or {}


def condition(api: FakeCluster) -> dict[str, Any]:
    status = api.pool_objects["default"]["status"]
    return next(c for c in status["conditions"] if c["type"] == "Defragmentation")


def test_a_round_marks_notices_evicts_holds_and_releases() -> None:
    api = cluster()
    run(api, T0)
    mark = parse_mark(api.gpu_node_objects["n1"]["metadata"]["annotations"][MARK])
    assert mark is not None and mark.gpus == (0,) and mark.pool == "default"
    assert MARK not in (api.gpu_node_objects["n2"]["metadata"].get("annotations") or {})
    for key in ("ns/a1", "ns/a2"):
        notice = parse_notice(annotations(api, key)[NOTICE])
        assert notice is not None and notice.room == "n1" and notice.claimant_pod == "ns/large"
        assert notice.evict_at == T0 + 30
    assert NOTICE not in annotations(api, "ns/b1")  # n2 received the moves: it stays
    assert condition(api)["status"] == "True"
    assert api.pool_objects["default"]["status"]["defrag"]["moves"] == 2
    assert [r for _, r, _ in api.events].count("DefragNotice") == 2

    run(api, T0 + 10)  # inside the buffer time: nobody is evicted, no new round
    assert api.written("evict_pod") == []

    run(api, T0 + 31)
    assert sorted(k for k, _ in api.written("evict_pod")) == ["ns/a1", "ns/a2"]
    holds = [s["reclaim"] for _, s in api.written("patch_lease_status")]
    assert {h["reason"] for h in holds} == {"Defragmentation"}
    assert {(h["room"], h["for"], h["forUid"]) for h in holds} == {("n1", "ns/large",
                                                                    "uid-large")}  # fmt: skip

    run(api, T0 + 32)  # a1 and a2 are gone: their card holds nothing, the mark is released
    assert MARK not in api.gpu_node_objects["n1"]["metadata"]["annotations"]
    assert "DefragReleased" in [r for _, r, _ in api.events]


def test_a_refused_eviction_is_recorded_once_and_retried() -> None:
    api = cluster()
    api.refuse_eviction["ns/a1"] = (
        "Cannot evict pod as it would violate the pod's disruption budget."
    )
    run(api, T0)
    run(api, T0 + 31)
    run(api, T0 + 40)
    assert [k for k, _ in api.written("evict_pod")].count("ns/a1") == 2
    assert [r for _, r, _ in api.events].count("EvictionBlocked") == 1
    notice = parse_notice(annotations(api, "ns/a1")[NOTICE])
    assert notice is not None and notice.blocked is not None


def test_a_round_that_times_out_withdraws_its_notices_and_releases_the_mark() -> None:
    api = cluster()
    api.refuse_eviction["ns/a1"] = "429"
    run(api, T0)
    run(api, T0 + 31)  # a2 goes, a1 is refused
    run(api, T0 + 601)
    assert MARK not in api.gpu_node_objects["n1"]["metadata"]["annotations"]
    assert NOTICE not in annotations(api, "ns/a1")
    assert "DefragWithdrawn" in [r for _, r, _ in api.events]


def test_a_budget_that_allows_no_disruption_keeps_its_card_and_the_other_card_clears() -> None:
    pdb = {"metadata": {"name": "b", "namespace": "ns"},
           "spec": {"selector": {"matchLabels": {"app": "b"}}},
           "status": {"disruptionsAllowed": 0}}  # fmt: skip
    api = cluster(budgets=[pdb])
    run(api, T0)
    assert NOTICE not in annotations(api, "ns/b1") and NOTICE not in annotations(api, "ns/b2")
    assert NOTICE in annotations(api, "ns/a1")


@pytest.mark.parametrize("kind", ["exclusive", "orphan"])
def test_exclusive_pods_and_orphans_are_never_moved(kind: str) -> None:
    api = cluster(a_owner=kind != "orphan", exclusive_a1=kind == "exclusive")
    run(api, T0)
    assert NOTICE not in annotations(api, "ns/a1")
    if kind == "orphan":
        assert NOTICE not in annotations(api, "ns/a2")


def test_orphans_move_when_the_pool_says_so() -> None:
    api = cluster(pool_json(moveOrphans=True), a_owner=False)
    run(api, T0)
    assert NOTICE in annotations(api, "ns/a1") and NOTICE in annotations(api, "ns/a2")


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"threshold": 120}, "from 0 to 100; got 120"),
        ({"timeoutSeconds": 10}, "must be longer than noticeSeconds"),
        ({"maxMoves": 0}, "maxMoves must be a whole number of 1 or more"),
        ({"intervalSeconds": "often"}, "intervalSeconds must be a number of seconds"),
    ],
)
def test_bad_settings_give_a_condition_and_move_nothing(change: dict[str, Any], words: str) -> None:
    api = cluster(pool_json(**change))
    run(api, T0)
    c = condition(api)
    assert c["status"] == "False" and c["reason"] == "InvalidSpec" and words in c["message"]
    assert api.written("annotate_gpu_node") == [] and not any(
        NOTICE in annotations(api, k) for k in api.pods
    )
    assert "InvalidDefragSpec" in [r for _, r, _ in api.events]


def test_a_pool_without_defrag_moves_nothing_and_says_so() -> None:
    pool = pool_json()
    pool["spec"]["defrag"]["enabled"] = False
    api = cluster(pool)
    run(api, T0)
    assert condition(api)["reason"] == "Disabled"
    assert api.written("annotate_gpu_node") == []


def test_the_next_round_waits_for_the_interval() -> None:
    api = cluster(pool_json(intervalSeconds=300))
    run(api, T0)
    run(api, T0 + 31)
    run(api, T0 + 32)  # released; the next round may start at T0 + 300
    before = len(api.written("annotate_gpu_node"))
    run(api, T0 + 100)
    assert len(api.written("annotate_gpu_node")) == before
    assert json.loads(json.dumps(api.pool_objects["default"]["status"]["defrag"]))["lastRound"]


def test_the_metrics_say_what_moved() -> None:
    from prometheus_client import CollectorRegistry

    from gpupool.adapters.metrics.defrag import DefragMetrics

    registry = CollectorRegistry()
    api = cluster()
    metrics = DefragMetrics(registry)
    for t in (T0, T0 + 31, T0 + 32):
        asyncio.run(DefragReconciler(api, lambda t=t: t, metrics).reconcile())

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {"pool": "default", **labels})

    assert value("gpupool_controller_defrag_rounds_total") == 1
    assert value("gpupool_controller_defrag_moves_total", outcome="noticed") == 2
    assert value("gpupool_controller_defrag_moves_total", outcome="evicted") == 2
    assert value("gpupool_controller_defrag_released_total", why="cleared") == 1
    assert value("gpupool_controller_defrag_marked_cards") == 0


def test_a_mark_the_api_server_refuses_fails_that_node_and_gives_no_notice_for_its_pods() -> None:
    api = cluster()
    api.fail_next("annotate_gpu_node")
    run(api, T0)  # the failure stays with the node: no raise
    assert MARK not in (api.gpu_node_objects["n1"]["metadata"].get("annotations") or {})
    assert NOTICE not in annotations(api, "ns/a1") and NOTICE not in annotations(api, "ns/a2")
    assert api.pool_objects["default"]["status"]["defrag"]["moves"] == 2  # the round recorded
    [(key, _, message)] = [e for e in api.events if e[1] == "ReconcileFailed"]
    assert key == "n1" and "ApiDown" in message


def test_a_condition_the_api_server_refuses_fails_that_pool_and_the_round_goes_on() -> None:
    api = cluster()
    api.fail_next("patch_gpu_pool_status")  # the first: the pool's Defragmentation condition
    reconciler = DefragReconciler(api, lambda: now)
    now = T0
    asyncio.run(reconciler.reconcile())
    assert "conditions" not in api.pool_objects["default"]["status"]
    assert NOTICE in annotations(api, "ns/a1") and NOTICE in annotations(api, "ns/a2")
    assert [k for k, r, _ in api.events if r == "ReconcileFailed"] == ["default"]
    due = reconciler.due_at()
    assert due is not None and due <= T0 + 5  # the condition is retried with the round
    now = T0 + 5
    asyncio.run(reconciler.reconcile())
    assert condition(api)["status"] == "True"
