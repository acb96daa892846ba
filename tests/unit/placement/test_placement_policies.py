"""Each policy's choice on a small cluster where the right answer is clear."""

from __future__ import annotations

import pytest
from placement_builders import cpu_only, node, occupy, share, whole

from gpupool.domain import Request
from gpupool.placement import (
    POLICIES,
    ClusterSnapshot,
    Decision,
    Planner,
    TargetWorkload,
)


def choose(
    snap: ClusterSnapshot, req: Request, policy: str, workload: TargetWorkload | None = None
) -> str:
    result = Planner(policy, workload).plan(snap, req)
    assert isinstance(result, Decision)
    return result.node


def used_and_empty() -> ClusterSnapshot:
    snap = ClusterSnapshot([node("empty", gpus=4), node("used", gpus=4)])
    occupy(snap, "used", 0, 40)
    return snap


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("binpack", "used"),
        ("spread", "empty"),
        ("best-fit", "used"),
        ("gpu-packing", "used"),
        ("dot-product", "used"),
    ],
)
def test_packing_versus_spreading(policy: str, expected: str) -> None:
    assert choose(used_and_empty(), share("p", 300), policy) == expected


def test_gpu_packing_prefers_partly_used_gpu_then_used_node_then_idle() -> None:
    snap = ClusterSnapshot(
        [node("idle", gpus=2), node("usednode", gpus=2), node("partgpu", gpus=2)]
    )
    occupy(snap, "usednode", 0, 80)  # card 0 full, card 1 free
    occupy(snap, "partgpu", 0, 40)
    assert choose(snap, share("p", 300), "gpu-packing") == "partgpu"
    assert choose(snap, whole("w"), "gpu-packing") == "usednode"


def test_gpu_clustering_prefers_nodes_running_the_same_kind() -> None:
    snap = ClusterSnapshot([node("a", gpus=8), node("b", gpus=8), node("c", gpus=8)])
    planner = Planner("binpack")
    for req, target in ((share("s", 200), "a"), (whole("w"), "b")):
        feas_node = snap.index[target]
        d = planner.decide(
            snap,
            req,
            __import__("gpupool.placement", fromlist=["feasibility"]).feasibility(snap, req),
            feas_node,
            0.0,
        )
        snap.assume(d)
    assert choose(snap, share("s2", 200), "gpu-clustering") == "a"
    assert choose(snap, whole("w2"), "gpu-clustering") == "b"


def test_random_is_reproducible_per_seed_and_spreads() -> None:
    snap = ClusterSnapshot([node(f"n{i}", gpus=8) for i in range(20)])
    picks = [Planner("random", seed=s).plan(snap, share()) for s in range(10)]
    names = [p.node for p in picks if isinstance(p, Decision)]
    assert len(set(names)) > 3
    again = Planner("random", seed=3).plan(snap, share())
    assert isinstance(again, Decision) and again.node == names[3]


@pytest.mark.parametrize("policy", ["fgd", "gpupool"])
def test_fragmentation_aware_policies_fill_exact_holes(policy: str) -> None:
    # Workload of half-card tasks: a 500 hole is perfect, a 700 hole leaves a useless 200.
    workload = TargetWorkload.from_requests([share(f"h{i}", 500) for i in range(10)])
    snap = ClusterSnapshot([node("hole700", gpus=1), node("hole500", gpus=1)])
    occupy(snap, "hole700", 0, 24)  # 80Gi card: 30% used → 700 milli free
    occupy(snap, "hole500", 0, 40)  # 500 milli free
    assert choose(snap, share("p", 500), policy, workload) == "hole500"


@pytest.mark.parametrize("policy", ["fgd", "gpupool"])
def test_fragmentation_aware_policies_keep_whole_nodes_for_big_jobs(policy: str) -> None:
    shapes = [whole(f"w{i}", gpus=8) for i in range(5)] + [share(f"s{i}", 250) for i in range(5)]
    workload = TargetWorkload.from_requests(shapes)
    snap = ClusterSnapshot([node("fresh", gpus=8), node("started", gpus=8)])
    occupy(snap, "started", 0, 20)
    assert choose(snap, share("p", 250), policy, workload) == "started"


def test_cpu_only_requests_are_scored_by_every_policy() -> None:
    workload = TargetWorkload.from_requests([share(), cpu_only()])
    for name in POLICIES:
        snap = ClusterSnapshot([node("a", gpus=2), node("b", gpus=0)])
        result = Planner(name, workload).plan(snap, cpu_only())
        assert isinstance(result, Decision), name
        assert result.cards == ()


def test_policies_needing_a_workload_say_so() -> None:
    with pytest.raises(ValueError, match="needs a target workload"):
        Planner("fgd")
    with pytest.raises(ValueError, match="unknown placement policy 'tetris'"):
        Planner("tetris")


def test_ties_go_to_the_first_node_in_rank_order() -> None:
    snap = ClusterSnapshot([node(f"n{i}", gpus=1) for i in range(4)])
    assert choose(snap, share(), "binpack") == "n0"
    result = Planner("binpack", rank=[3, 2, 0, 1]).plan(snap, share())
    assert isinstance(result, Decision) and result.node == "n2"


def test_multi_gpu_prefers_one_nvlink_domain_then_numa() -> None:
    from gpupool.domain import Gpu, Node

    gpus = tuple(
        Gpu(index=i, model="H800", uuid=f"u{i}", numa_node=i // 4, nvlink_domain=i // 2)
        for i in range(8)
    )
    snap = ClusterSnapshot([Node("nv", 128_000, 1 << 20, gpus)])
    occupy(snap, "nv", 0, 1)  # breaks domain 0 (cards 0,1)
    pair = Planner("binpack").plan(snap, whole(gpus=2))
    assert isinstance(pair, Decision) and pair.cards == (2, 3)
    snap.assume(pair)
    quad = Planner("binpack").plan(snap, whole(gpus=4))  # only NUMA node 1 has 4 free
    assert isinstance(quad, Decision) and quad.cards == (4, 5, 6, 7)
