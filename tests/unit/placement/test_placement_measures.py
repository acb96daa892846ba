"""The two fragmentation measures on hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest
from placement_builders import cpu_only, node, occupy, share, whole

from gpupool.placement import ClusterSnapshot, FragmentationModel, TargetWorkload
from gpupool.placement.capacity import CapacityModel
from gpupool.placement.policies.fgd import FragCache
from gpupool.placement.policies.gpupool import MeanMeasure


def snapshot_with_cpu(cpu_milli: int) -> ClusterSnapshot:
    """One node of 10 cores, two 80Gi cards: card 0 free, card 1 with 300 milli free (56Gi used);
    other pods hold all but `cpu_milli` of its CPU."""
    snap = ClusterSnapshot([node("n", gpus=2, cpu=10_000)])
    occupy(snap, "n", 1, 56)
    snap.cpu_free[0] = cpu_milli
    return snap


WORKLOAD = TargetWorkload.from_requests(
    [share("s", 500, cpu=1000), whole("w", cpu=4000)], cutoff=1.0
)


def frag(model: object, snap: ClusterSnapshot) -> float:
    rows = np.arange(len(snap))
    return float(model.node_frag(rows, snap.cpu_free, snap.share_free)[0])  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("cpu", "fgd", "capacity"),
    [
        # Plenty of CPU: both count the 300-milli card for both shapes: 0.5*300 + 0.5*300.
        (10_000, 300.0, 300.0),
        # CPU for one half-card task and no 1-GPU task. FGD: the half-card shape is still
        # hostable (150), the 1-GPU shape is not (all 1300 count: 650). Capacity: a stream of
        # half-card tasks uses one slice of 1300 and leaves 800 with no CPU, which no task of
        # the mix can take (0.5*800); a stream of 1-GPU tasks uses nothing, where the node's
        # own ratio (6.5 cores for 1.3 free GPUs) would feed one, and leaves all 1300 with the
        # CPU for one more half-card task, so only the 1-GPU half of the mix misses it
        # (0.5*0.5*1300).
        (1_000, 800.0, 725.0),
    ],
)
def test_measures_by_hand(cpu: int, fgd: float, capacity: float) -> None:
    snap = snapshot_with_cpu(cpu)
    assert snap.share_free[0].tolist() == [1000, 300]
    assert frag(FragmentationModel(snap, WORKLOAD), snap) == pytest.approx(fgd)
    assert frag(CapacityModel(snap, WORKLOAD), snap) == pytest.approx(capacity)
    mean = MeanMeasure(FragmentationModel(snap, WORKLOAD), CapacityModel(snap, WORKLOAD))
    assert frag(mean, snap) == pytest.approx((fgd + capacity) / 2)


def test_capacity_counts_card_remainders_that_fgd_calls_usable() -> None:
    # A 600-milli hole for 470-milli tasks: FGD sees no fragment, capacity strands 130.
    snap = ClusterSnapshot([node("n", gpus=1)])
    occupy(snap, "n", 0, 32)  # 80Gi card, 40% used
    workload = TargetWorkload.from_requests([share("s", 470, cpu=0)], cutoff=1.0)
    assert frag(FragmentationModel(snap, workload), snap) == pytest.approx(0.0)
    assert frag(CapacityModel(snap, workload), snap) == pytest.approx(130.0)


def test_cpu_only_shapes_count_all_free_share_in_both() -> None:
    snap = snapshot_with_cpu(64_000)
    shapes = [share("s", 500, cpu=0), *(cpu_only(f"c{i}") for i in range(3))]
    workload = TargetWorkload.from_requests(shapes, cutoff=1.0)
    # 3/4 CPU-only (all 1300 count) + 1/4 half-card shape (the 300 card counts).
    expected = 0.75 * 1300 + 0.25 * 300
    assert frag(FragmentationModel(snap, workload), snap) == pytest.approx(expected)
    assert frag(CapacityModel(snap, workload), snap) == pytest.approx(expected)


def test_a_nodes_own_cpu_per_card_is_not_fragmentation_for_the_capacity_measure() -> None:
    """Two free cards and 4 cores that nothing has used: a stream of 4-core 1-GPU tasks fills
    one card only, but no placement made that so and none can undo it: nothing is stranded.
    Once a CPU-only pod takes 2 of the 4 cores, the card the node could have fed is stranded
    by that pod (1000); the other never could be."""
    snap = ClusterSnapshot([node("n", gpus=2, cpu=4_000)])
    workload = TargetWorkload.from_requests([whole("w", cpu=4000)], cutoff=1.0)
    assert frag(CapacityModel(snap, workload), snap) == pytest.approx(0.0)
    snap.cpu_free[0] = 2_000
    assert frag(CapacityModel(snap, workload), snap) == pytest.approx(1000.0)


def test_capacity_strands_only_for_the_tasks_that_cannot_use_what_a_stream_leaves() -> None:
    """Two free cards and 60Gi of node memory. A stream of 47Gi 1-GPU tasks takes one card and
    leaves the other with 13Gi beside it: stranded for those tasks, but a 10Gi 1-GPU task takes
    it, so it counts only for the half of the mix that could not (0.5 x 0.5 x 1000). Alone in
    the workload, the 47Gi tasks strand the card in full."""
    snap = ClusterSnapshot([node("n", gpus=2, cpu=32_000, mem=60 * 1024)])
    # different CPU asks: a shape is its CPU and GPU ask, and carries its tasks' mean memory
    big = whole("big", cpu=2000, memory_mib=47 * 1024)
    small = whole("small", cpu=1000, memory_mib=10 * 1024)
    rows = np.arange(1)
    args = (rows, snap.cpu_free, snap.share_free, snap.mem_free)
    mixed = TargetWorkload.from_requests([big, small], cutoff=1.0)
    assert CapacityModel(snap, mixed).node_frag(*args)[0] == pytest.approx(250.0)
    alone = TargetWorkload.from_requests([big], cutoff=1.0)
    assert CapacityModel(snap, alone).node_frag(*args)[0] == pytest.approx(1000.0)


class CountingMeasure:
    """A measure that records how many rows each call measured."""

    def __init__(self, inner: MeanMeasure) -> None:
        self.inner = inner
        self.node_kind = inner.node_kind
        self.batches: list[int] = []

    def node_frag(
        self,
        rows: np.ndarray,
        cpu_free: np.ndarray,
        share_free: np.ndarray,
        mem_free: np.ndarray | None = None,
    ) -> np.ndarray:
        self.batches.append(len(rows))
        return self.inner.node_frag(rows, cpu_free, share_free, mem_free)


def test_the_cache_measures_each_distinct_node_state_once_and_every_row_gets_its_own() -> None:
    # 40 nodes of 2 cores and 40 of 40 cores, same cards, half of each with a card partly used
    # and little CPU left: alike in state, but the node's own CPU per card sets them apart
    nodes = [node(f"small{i}", gpus=2, cpu=2_000) for i in range(40)]
    nodes += [node(f"big{i}", gpus=2, cpu=40_000) for i in range(40)]
    snap = ClusterSnapshot(nodes)
    for n in [*nodes[:20], *nodes[40:60]]:
        occupy(snap, n.name, 1, 56)
        snap.cpu_free[snap.index[n.name]] = 1000
    measure = CountingMeasure(
        MeanMeasure(FragmentationModel(snap, WORKLOAD), CapacityModel(snap, WORKLOAD))
    )
    rows = np.arange(len(snap))
    state = (rows, snap.cpu_free, snap.share_free, snap.mem_free)
    alone = measure.inner.node_frag(*state)
    assert alone[0] != alone[40], "the two sizes must measure differently here"
    cached = FragCache(snap, measure).measure(*state)
    assert measure.batches == [4]  # two kinds of node, two states each
    assert (cached == alone).all()  # the same value, to the last bit
