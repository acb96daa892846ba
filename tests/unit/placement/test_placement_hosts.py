"""gpupool's host reserves (tasks only few nodes are big enough for) and the capacity measure's
memory bound, on hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest
from placement_builders import node, whole

from gpupool.domain import Node, Request
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
from gpupool.placement.policies.gpupool import GpupoolPolicy
from gpupool.placement.policies.hosts import HostReserve

GiB_MI = 1024


def g3(name: str) -> Node:
    """The trace's G3: 8 cards, 128 cores, 768 GiB: the only host of its 120-core 8-GPU tasks."""
    return node(name, gpus=8, model="G3", cpu=128_000, mem=768 * GiB_MI)


def g2(name: str) -> Node:
    return node(name, gpus=8, model="G2", cpu=96_000, mem=384 * GiB_MI)


def big8(name: str = "b") -> Request:
    return whole(name, gpus=8, cpu=120_000, memory_mib=700 * GiB_MI)


def small(name: str = "o") -> Request:
    return whole(name, gpus=1, cpu=8_000, memory_mib=32 * GiB_MI)


def put(snap: ClusterSnapshot, req: Request, name: str) -> None:
    """Place `req` on the named node (its cards chosen as the planner would)."""
    feas = feasibility(snap, req)
    snap.assume(Planner("binpack").decide(snap, req, feas, snap.index[name], 0.0))


def ctx_for(snap: ClusterSnapshot, req: Request) -> PlanContext:
    feas = feasibility(snap, req)
    return PlanContext(snap, req, feas, feas.nodes)


def costs(snap: ClusterSnapshot, workload: TargetWorkload, req: Request) -> dict[str, float]:
    ctx = ctx_for(snap, req)
    cost = HostReserve(snap, workload).cost(ctx)
    return {snap.names[i]: float(c) for i, c in zip(ctx.rows, cost, strict=True)}


# Half of the GPU load is 120-core 8-GPU tasks (only G3 hosts them), half 1-GPU tasks.
WORKLOAD = TargetWorkload.from_requests([big8()] + [small(f"o{i}") for i in range(8)], cutoff=1)


def test_the_workload_carries_each_shapes_mean_memory() -> None:
    workload = TargetWorkload.from_requests(
        [small("a"), whole("b", gpus=1, cpu=8_000, memory_mib=64 * GiB_MI), big8()], cutoff=1
    )
    memory = dict(zip(workload.shapes, workload.memory_mib, strict=True))
    assert sorted(memory.values()) == [48 * GiB_MI, 700 * GiB_MI]


def test_a_task_that_could_go_anywhere_pays_for_the_reserve_it_takes() -> None:
    # F = 16 free GPUs, the G3-only set's reserve 0.5 x 16 = 8 GPUs = all of the G3's share:
    # a 1-GPU task there takes 1000 milli of reserve, on the G2 none; the 120-core task pays
    # nothing (it is the reserved demand), an 8-GPU task of 64 cores pays its whole share on G3.
    snap = ClusterSnapshot([g3("g3"), g2("g2")])
    assert costs(snap, WORKLOAD, small()) == {"g3": 1000.0, "g2": 0.0}
    assert costs(snap, WORKLOAD, big8()) == {"g3": 0.0}
    mid = whole("m", gpus=8, cpu=64_000, memory_mib=256 * GiB_MI)
    assert costs(snap, WORKLOAD, mid) == {"g3": 8000.0, "g2": 0.0}


def test_the_reserve_is_pooled_over_equal_nodes_and_shrinks_as_the_cluster_fills() -> None:
    # Two G3s: F = 24, reserve 0.5 x 24 = 12 of their 16 free GPUs; surplus 4 GPUs over both.
    snap = ClusterSnapshot([g3("a"), g3("b"), g2("g2")])
    mid = whole("m", gpus=8, cpu=64_000, memory_mib=256 * GiB_MI)
    assert costs(snap, WORKLOAD, small()) == {"a": 0.0, "b": 0.0, "g2": 0.0}
    assert costs(snap, WORKLOAD, mid) == {"a": 4000.0, "b": 4000.0, "g2": 0.0}
    put(snap, whole("g2-full", gpus=8, cpu=8_000), "g2")  # F = 16
    # reserve 0.5 x 16 = 8 of 16: a surplus of 8 GPUs, the 64-core 8-GPU task now pays nothing
    assert costs(snap, WORKLOAD, mid) == {"a": 0.0, "b": 0.0}


def test_no_host_reserve_where_every_shape_fits_every_node() -> None:
    workload = TargetWorkload.from_requests([small(f"o{i}") for i in range(4)], cutoff=1)
    snap = ClusterSnapshot([g3("g3"), g2("g2")])
    assert costs(snap, workload, small()) == {"g3": 0.0, "g2": 0.0}


class WithoutHosts(GpupoolPolicy):
    """gpupool with the host-reserve term left out (to show what the term changes)."""

    def score(self, ctx: PlanContext) -> np.ndarray:
        delta = self.cache(ctx.snap).delta(ctx) - self.reserve.cost(ctx)
        return np.floor(100.0 / (1.0 + np.exp(-delta / 1000.0)))


def test_the_host_reserve_keeps_a_1_gpu_task_off_the_g3_that_packing_would_fill() -> None:
    workload = TargetWorkload.from_requests(
        [big8(f"b{i}") for i in range(4)]
        + [whole(f"e{i}", gpus=8, cpu=64_000, memory_mib=256 * GiB_MI) for i in range(2)]
        + [whole("f", gpus=4, cpu=32_000, memory_mib=128 * GiB_MI)],
        cutoff=1,
    )
    snap = ClusterSnapshot([g2("g2-part"), g3("g3"), g2("g2-idle")])
    put(snap, whole("x", gpus=2, cpu=16_000), "g2-part")
    put(snap, whole("y", gpus=5, cpu=40_000), "g3")
    assert snap.share_free.sum(axis=1).tolist() == [6000, 3000, 8000]
    # Both measures prefer filling the G3's last cards (the fullest node); but 120-core tasks
    # are 32/52 of the GPU load, so the G3's reserve (0.62 x 17 free GPUs) exceeds its 3 free
    # GPUs: a 1-GPU task there costs its whole card, and goes to a G2 instead.
    assert costs(snap, workload, small()) == {"g2-part": 0.0, "g3": 1000.0, "g2-idle": 0.0}
    chosen = {}
    for policy in (WithoutHosts(workload), GpupoolPolicy(workload)):
        result = Planner(policy, workload).plan(snap, small())
        assert isinstance(result, Decision)
        chosen[type(policy).__name__] = result.node
    assert chosen == {"WithoutHosts": "g3", "GpupoolPolicy": "g2-part"}


def test_capacity_counts_cards_without_node_memory_as_stranded_fgd_does_not() -> None:
    # A G2 holding a 4-GPU task that asked 313 of its 384 GiB: four free cards, 36 cores, 71 GiB.
    snap = ClusterSnapshot([g2("n")])
    put(snap, whole("big", gpus=4, cpu=60_000, memory_mib=313 * GiB_MI), "n")
    workload = TargetWorkload.from_requests(
        [whole("f", gpus=4, cpu=32_000, memory_mib=128 * GiB_MI)], cutoff=1
    )
    rows = np.arange(1)
    args = (rows, snap.cpu_free, snap.share_free)
    assert FragmentationModel(snap, workload).node_frag(*args, snap.mem_free)[0] == 0.0
    capacity = CapacityModel(snap, workload)
    assert capacity.node_frag(*args)[0] == 0.0  # by CPU alone one more 4-GPU task fits
    assert capacity.node_frag(*args, snap.mem_free)[0] == pytest.approx(4000.0)
