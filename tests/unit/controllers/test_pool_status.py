"""GpuPool status: the pure computation over cards (which ones a pool covers, capacity,
allocated, the pool's fragmentation, the cards over its threshold) and the reconciler that
patches it over the in-memory cluster after the admission round and the /metrics reading, with
the `CardsFragmented` condition beside another writer's conditions."""

from __future__ import annotations

import asyncio

import pytest
from fake_cluster import FakeCluster, lease_json, pod_json, quota_json
from support.builders import node_json

from gpupool.adapters.kubernetes.pool import read_pool
from gpupool.adapters.metrics.controller import ControllerMetrics
from gpupool.controllers.admission.reconcile import AdmissionReconciler
from gpupool.controllers.defrag.plan import plan_defrag_round
from gpupool.controllers.observe import MetricsObserver
from gpupool.controllers.pool_status.plan import PoolCard, pool_status
from gpupool.controllers.pool_status.reconcile import PoolStatusReconciler
from gpupool.controllers.reclaim.room import build_placement
from gpupool.state.pool import PoolObject

NOW = 1_767_225_600.0
GiB = 2**30


def _card(node: str, gpu: int, used_gib: int, frag: float, model: str = "A100-80GB") -> PoolCard:
    return PoolCard(node, gpu, f"GPU-{node}-{gpu}", model, 80 * GiB, used_gib * GiB, frag)


def test_the_pool_covers_its_nodes_and_models_and_flags_cards_over_its_threshold() -> None:
    cards = [
        _card("n1", 0, 70, 10 / 80),  # 10Gi free, all fragment: 12.5%
        _card("n1", 1, 40, 0.4),  # 40Gi free, 32Gi of it fragment: 40%
        _card("n2", 0, 0, 0.0),  # another pool's node
        _card("n1", 2, 0, 0.0, model="T4"),  # not one of the pool's models
    ]
    labels = {"n1": {"pool": "a"}, "n2": {"pool": "b"}}
    pool = PoolObject("a", 3, node_selector=(("pool", "a"),), models=("A100-80GB",))
    status = pool_status(pool, cards, labels)
    assert (status.nodes, status.gpus) == (1, 2)
    assert status.capacity_bytes == 160 * GiB
    assert status.allocated_bytes == 110 * GiB
    # fragment bytes (10Gi + 32Gi) over the free bytes (10Gi + 40Gi)
    assert status.fragmentation == pytest.approx(42 / 50)
    assert [c.uuid for c in status.over] == ["GPU-n1-1"]  # 40% > 30%; 12.5% is not
    assert status.condition_true and status.reason == "CardsOverThreshold"
    assert "n1/1 40.0%" in status.message

    calm = pool_status(PoolObject("a", 3, threshold_pct=45), cards, labels)
    assert calm.gpus == 4 and calm.over == () and not calm.condition_true
    assert calm.reason == "NoCardOverThreshold"


def test_a_full_pool_has_no_fragmentation_to_divide() -> None:
    status = pool_status(PoolObject("a", 1), [_card("n1", 0, 80, 0.0)], {"n1": {}})
    assert status.fragmentation == 0.0 and status.over == ()


def _pool(name: str, **spec: object) -> dict[str, object]:
    return {
        "apiVersion": "gpupool.io/v1alpha1",
        "kind": "GpuPool",
        "metadata": {"name": name, "generation": 2},
        "spec": spec,
        "status": {"conditions": [{"type": "DefragReady", "status": "True", "reason": "Ok"}]},
    }


def _cluster() -> FakeCluster:
    """n1 (label pool=a): two A100-80GB cards (72Gi each after the reserve), p1 holds 70Gi of
    card 0 and p2 (12Gi) queues, so card 0's free 2Gi is below both common requests: all of it
    fragment, 2.8% of the card, over pool a's 2% threshold."""
    running = pod_json("p1", "alpha", 70, admitted_at=NOW - 3600, node="n1", phase="Running")
    return FakeCluster(
        pods=[running, pod_json("p2", "alpha", 12, gated=True, created=NOW - 300)],
        quotas=[quota_json("alpha", 80)],
        leases=[lease_json(running, phase="Active", start=NOW - 3600, gib=70)],
        nodes=[node_json("n1", cards=2, labels={"pool": "a"}), node_json("n2", cards=1)],
        pools=[
            _pool("a", nodeSelector={"pool": "a"}, defragThresholdPercent=2),
            _pool("strict", defragThresholdPercent=100),
            _pool("broken", defragThresholdPercent="lots"),
        ],
    )


def _round(cluster: FakeCluster, now: float = NOW) -> None:
    async def run() -> None:
        round_ = await AdmissionReconciler(cluster, lambda: now).reconcile()
        reading = await MetricsObserver(cluster, ControllerMetrics()).observe(round_)
        await PoolStatusReconciler(cluster).reconcile(reading.cards, now)

    asyncio.run(run())


def test_the_status_is_written_with_its_condition_beside_the_others() -> None:
    cluster = _cluster()
    _round(cluster)
    a = cluster.pool_objects["a"]["status"]
    assert (a["nodes"], a["gpus"], a["observedGeneration"]) == (1, 2, 2)
    assert a["capacityBytes"] > 0 and a["allocatedBytes"] == 70 * GiB
    assert a["allocated"] == "70Gi"
    assert a["cardsOverThreshold"] == 1  # card 0: its whole free part is fragment
    free = a["capacityBytes"] - 70 * GiB
    card_free = a["capacityBytes"] // 2 - 70 * GiB
    # the card's measure counts in shares of a thousandth of the card: equal to that grain
    assert float(a["fragmentation"].rstrip("%")) == pytest.approx(100 * card_free / free, abs=0.2)
    types = {c["type"]: c for c in a["conditions"]}
    assert types["DefragReady"]["status"] == "True"  # another writer's condition stays
    assert types["CardsFragmented"]["status"] == "True"
    assert types["CardsFragmented"]["reason"] == "CardsOverThreshold"
    assert "n1/0" in types["CardsFragmented"]["message"]
    strict = cluster.pool_objects["strict"]["status"]
    assert strict["gpus"] == 3 and strict["cardsOverThreshold"] == 0
    assert {c["type"]: c["status"] for c in strict["conditions"]}["CardsFragmented"] == "False"
    broken = {c["type"]: c for c in cluster.pool_objects["broken"]["status"]["conditions"]}
    assert broken["CardsFragmented"]["status"] == "Unknown"
    assert "defragThresholdPercent" in broken["CardsFragmented"]["message"]


def test_an_unchanged_status_is_not_written_again_and_the_transition_time_stays() -> None:
    cluster = _cluster()
    _round(cluster)
    writes = len(cluster.written("patch_gpu_pool_status"))
    first = cluster.pool_objects["a"]["status"]["conditions"][-1]["lastTransitionTime"]
    _round(cluster, NOW + 60)
    assert len(cluster.written("patch_gpu_pool_status")) == writes
    assert cluster.pool_objects["a"]["status"]["conditions"][-1]["lastTransitionTime"] == first


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"nodeSelector": "pool=a"}, "spec.nodeSelector must map labels to values"),
        ({"models": "A100-80GB"}, "spec.models must be a list of model names"),
        ({"defragThresholdPercent": 120}, "from 0 to 100; got 120"),
    ],
)
def test_a_pool_whose_scope_cannot_be_read_covers_nothing_for_either_loop(
    spec: dict[str, object], words: str
) -> None:
    """The status and the defragmentation loop read the pool through the one decoder: a scope
    it cannot read is the same problem for both, and covers no card (it once meant every node
    to the defragmentation loop when the selector was not a mapping)."""
    pool = read_pool({"metadata": {"name": "a", "generation": 4}, "spec": spec})
    assert pool.problem is not None and words in pool.problem and pool.generation == 4
    assert pool.any_problem == pool.problem
    assert not pool.covers_node({"pool": "a"}) and not pool.covers({"pool": "a"}, "A100-80GB")
    plan = plan_defrag_round([pool], build_placement([], [], []), [], [], {}, NOW)
    assert [(c.ok, c.reason) for c in plan.conditions] == [(False, "InvalidSpec")]
