"""The fill experiment along the DRA path on small clusters: where it matches the extender path,
where its rounding costs, and what kube-scheduler's first device that fits gives."""

from __future__ import annotations

from gpupool.domain import Node, Request, uniform_node
from gpupool.placement import ClusterSnapshot, Decision, Planner
from gpupool.placement.policies.first_fit import FirstFitByDevicePolicy
from gpupool.placement.workload import TargetWorkload
from gpupool.simulator.dra_claims import allocate_claim
from gpupool.simulator.fill import FillConfig, run_fill


def v100s(n: int, cpu: int = 32_000) -> list[Node]:
    return [
        uniform_node(f"n{i}", cpu_milli=cpu, memory_mib=1 << 18, gpu_count=2, model="V100-16GB")
        for i in range(n)
    ]


def tasks(millis: list[int]) -> list[Request]:
    return [
        Request(f"t{k}", cpu_milli=1000, gpu_count=1, gpu_milli=m) for k, m in enumerate(millis)
    ]


def test_shares_of_whole_mib_give_the_extender_paths_figures_exactly() -> None:
    # quarters of a 16384 MiB card are whole MiB and whole percents: the claims round nothing
    work = tasks([250, 500, 750, 1000, 250, 500] * 4)
    for seed in (1, 2, 3):
        config = FillConfig(seed=seed)
        extender = run_fill(v100s(4), work, "gpupool", config)
        dra = run_fill(v100s(4), work, "gpupool", config, allocate=allocate_claim)
        assert dra.unallocated_gpu_pct == extender.unallocated_gpu_pct
        assert (dra.placed, dra.failed) == (extender.placed, extender.failed)


def test_complements_that_fill_a_card_fill_it_on_both_paths() -> None:
    # 810 + 190 fill a 16 GiB card exactly on the extender path (13271.04 + 3112.96 MiB); the
    # claims consume each slice down to a whole MiB, so they still share the card
    work = tasks([810, 190] * 8)
    config = FillConfig(seed=1)
    extender = run_fill(v100s(4), work, "best-fit", config)
    dra = run_fill(v100s(4), work, "best-fit", config, allocate=allocate_claim)
    assert dra.unallocated_gpu_pct == extender.unallocated_gpu_pct
    assert (dra.placed, dra.failed) == (extender.placed, extender.failed)


def test_sizes_that_are_no_whole_mib_cost_where_a_card_would_be_filled_exactly() -> None:
    # byte asks that are no whole MiB are consumed a whole MiB up: 8191.6 and 8192.3 MiB fill a
    # 16384 MiB card together as asked (16383.9), not as consumed (8192 + 8193 = 16385)
    mib = 1024 * 1024
    sizes = [8191 * mib + 6 * mib // 10, 8192 * mib + 3 * mib // 10] * 4
    work = [Request(f"b{k}", cpu_milli=1000, gpu_count=1, gpu_memory_bytes=size)
            for k, size in enumerate(sizes)]  # fmt: skip
    config = FillConfig(seed=1)
    extender = run_fill(v100s(2), work, "best-fit", config)
    dra = run_fill(v100s(2), work, "best-fit", config, allocate=allocate_claim)
    assert dra.failed > extender.failed


def test_first_fit_by_device_spreads_slices_where_gpupool_packs_them() -> None:
    # two half cards and then a task of two whole cards, on two nodes of two cards
    work = [*tasks([500, 500]), Request("pair", cpu_milli=1000, gpu_count=2)]
    workload = TargetWorkload.from_requests(work)

    def placed(planner: Planner) -> list[str]:
        snap = ClusterSnapshot(v100s(2))
        nodes = []
        for req in work:
            d = allocate_claim(planner, snap, req)
            if isinstance(d, Decision):
                snap.assume(d)
                nodes.append(d.node)
        return nodes

    gpupool = placed(Planner("gpupool", workload))
    assert len(gpupool) == 3 and gpupool[0] == gpupool[1] != gpupool[2]
    # kube-scheduler's least-allocated cpu/memory score sends the second half to the other node
    first_fit = placed(Planner(FirstFitByDevicePolicy(seed=1)))
    assert first_fit == ["n0", "n1"] or first_fit == ["n1", "n0"]
