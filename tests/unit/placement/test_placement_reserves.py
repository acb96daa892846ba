"""gpupool's reserves: model reserves for restricted tasks, group reserves for multi-GPU tasks,
and the measure that counts a restricted shape only where it could run."""

from __future__ import annotations

import numpy as np
import pytest
from placement_builders import cpu_only, node, occupy, share, whole

from gpupool.domain import Request
from gpupool.placement import (
    ClusterSnapshot,
    Decision,
    FragmentationModel,
    Planner,
    TargetWorkload,
    feasibility,
)
from gpupool.placement.capacity import CapacityModel
from gpupool.placement.context import PlanContext
from gpupool.placement.policies.accepting import AcceptingMeasure
from gpupool.placement.policies.reserve import ModelReserve, restricted_fractions


def ctx_for(snap: ClusterSnapshot, req: Request) -> PlanContext:
    feas = feasibility(snap, req)
    return PlanContext(snap, req, feas, feas.nodes)


def choose(snap: ClusterSnapshot, req: Request, policy: str, workload: TargetWorkload) -> str:
    result = Planner(policy, workload).plan(snap, req)
    assert isinstance(result, Decision)
    return result.node


def t4_restricted_workload() -> TargetWorkload:
    """Half of the GPU load may run only on T4; the rest anywhere."""
    tasks = [whole(f"t{i}", models=("T4",)) for i in range(5)]
    tasks += [whole(f"a{i}") for i in range(5)]
    return TargetWorkload.from_requests(tasks, cutoff=1.0)


def test_restricted_fractions_are_shares_of_gpu_load() -> None:
    tasks = [whole("w8", gpus=8, models=("T4",)), share("s", 500), share("s2", 500)]
    fractions = restricted_fractions(TargetWorkload.from_requests(tasks, cutoff=1.0))
    assert fractions == {("T4",): pytest.approx(8000 / 9000)}


def test_no_reserve_cost_on_an_unrestricted_workload() -> None:
    workload = TargetWorkload.from_requests([share("s", 500), whole("w", gpus=2)], cutoff=1.0)
    snap = ClusterSnapshot([node("a", gpus=2, model="T4"), node("b", gpus=8)])
    assert not ModelReserve(workload)
    assert not ModelReserve(workload).cost(ctx_for(snap, whole("p"))).any()


def test_unrestricted_tasks_pay_for_the_reserve_they_take_restricted_ones_do_not() -> None:
    # 2 T4 cards free of 10 in all: a T4 reserve of 0.5 x 10 cards exceeds them, so every
    # milli an unrestricted 1-GPU task takes on T4 is reserve; the A100 node has surplus.
    snap = ClusterSnapshot([node("t4", gpus=2, model="T4"), node("a100", gpus=8)])
    reserve = ModelReserve(t4_restricted_workload())
    ctx = ctx_for(snap, whole("p"))
    cost = dict(zip((snap.names[i] for i in ctx.rows), reserve.cost(ctx), strict=True))
    assert cost == {"t4": 1000.0, "a100": 0.0}
    assert not reserve.cost(ctx_for(snap, whole("r", models=("T4",)))).any()


def test_gpupool_keeps_the_restricted_model_for_its_tasks_where_fgd_does_not() -> None:
    snap = ClusterSnapshot([node("t4", gpus=2, model="T4"), node("a100", gpus=8)])
    tasks = [whole(f"a{i}", models=("A100-80GB",)) for i in range(4)]
    tasks += [whole(f"t{i}", models=("T4",)) for i in range(2)]
    workload = TargetWorkload.from_requests(tasks + [whole(f"u{i}") for i in range(4)], cutoff=1)
    # FGD counts the free T4 cards as fragments for the many A100-only tasks, so it puts the
    # unrestricted task on T4, whose two cards the T4-only tasks (a fifth of the load) need;
    # gpupool sends it to the A100 node, which has room beyond its own reserve.
    assert choose(snap, whole("p"), "fgd", workload) == "t4"
    assert choose(snap, whole("p"), "gpupool", workload) == "a100"


@pytest.mark.parametrize("make", [FragmentationModel, CapacityModel])
def test_accepting_measure_is_the_wrapped_measure_without_restrictions(make: type) -> None:
    workload = TargetWorkload.from_requests(
        [share("s", 300), whole("w", gpus=2), cpu_only("c")], cutoff=1.0
    )
    snap = ClusterSnapshot([node("a", gpus=4), node("b", gpus=2, model="T4")])
    occupy(snap, "a", 0, 30)
    rows = np.arange(len(snap))
    wrapped = make(snap, workload).node_frag(rows, snap.cpu_free, snap.share_free)
    accepting = AcceptingMeasure(snap, workload, make).node_frag(
        rows, snap.cpu_free, snap.share_free
    )
    assert np.array_equal(wrapped, accepting)


def test_a_restricted_shape_counts_nothing_on_nodes_of_other_models() -> None:
    workload = TargetWorkload.from_requests([whole("t", models=("T4",))], cutoff=1.0)
    snap = ClusterSnapshot([node("t4", gpus=2, model="T4"), node("a100", gpus=2)])
    occupy(snap, "t4", 0, 1)  # a T4 card partly used: a fragment for 1-GPU tasks
    rows = np.arange(len(snap))
    fgd = FragmentationModel(snap, workload).node_frag(rows, snap.cpu_free, snap.share_free)
    mine = AcceptingMeasure(snap, workload, FragmentationModel).node_frag(
        rows, snap.cpu_free, snap.share_free
    )
    assert fgd[1] == 2000.0 and mine[1] == 0.0  # FGD calls the idle A100s fragments
    assert mine[0] == fgd[0] > 0
