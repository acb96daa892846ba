"""The fill experiment on small clusters where the answer is known."""

from __future__ import annotations

import numpy as np
import pytest

from gpupool.domain import GiB, Request, uniform_node
from gpupool.placement import ClusterSnapshot
from gpupool.placement.policies.gpupool import GpupoolPolicy
from gpupool.placement.workload import TargetWorkload
from gpupool.simulator.builtin import builtin_scenario
from gpupool.simulator.experiment import run_experiment
from gpupool.simulator.fill import FillConfig, inflate, run_fill
from gpupool.simulator.load import nominal_gpu_milli


def tiny_cluster() -> list:  # type: ignore[type-arg]
    return [
        uniform_node(f"n{i}", cpu_milli=64_000, memory_mib=1 << 20, gpu_count=2, model="A100-80GB")
        for i in range(2)
    ]


def test_perfectly_packable_load_leaves_nothing_unallocated() -> None:
    tasks = [Request(f"t{i}", cpu_milli=100, gpu_count=1, gpu_milli=100) for i in range(40)]
    run = run_fill(tiny_cluster(), tasks, "best-fit", FillConfig(seed=1))
    assert run.unallocated_gpu_pct[100] == pytest.approx(0.0)
    assert run.unallocated_gpu_pct[130] == pytest.approx(0.0)
    assert run.placed == 40 and run.failed == run.tasks - 40


def test_whole_node_jobs_that_cannot_fit_show_up_as_unallocated() -> None:
    # 3-GPU jobs on 2-GPU nodes never fit: everything stays unallocated.
    tasks = [Request(f"t{i}", cpu_milli=100, gpu_count=3) for i in range(4)]
    run = run_fill(tiny_cluster(), tasks, "fgd", FillConfig(seed=1))
    assert run.placed == 0
    assert run.unallocated_gpu_pct[100] == pytest.approx(100.0)


def test_inflation_reaches_the_target_and_no_further() -> None:
    reqs = [Request(f"t{i}", gpu_count=1, gpu_milli=m) for i, m in enumerate([100, 300, 500, 700])]
    load = [r.gpu_request_milli for r in reqs]
    tasks, task_load = inflate(reqs, load, 4000, 1.3, np.random.default_rng(3))
    assert sum(task_load) >= 5200 and sum(task_load) - max(load) < 5200
    assert len({t.name for t in tasks}) == len(tasks)


def test_byte_requests_count_against_the_cards_they_accept() -> None:
    snap = ClusterSnapshot(
        [
            uniform_node("a", cpu_milli=1, memory_mib=1, gpu_count=1, model="A100-80GB"),
            uniform_node("r", cpu_milli=1, memory_mib=1, gpu_count=1, model="RTX-3090"),
        ]
    )
    only_a100 = Request("x", gpu_count=1, gpu_memory_bytes=20 * GiB, models=("A100-80GB",))
    assert nominal_gpu_milli(snap, only_a100) == 250
    anywhere = Request("y", gpu_count=1, gpu_memory_bytes=12 * GiB, compute_pct=50)
    assert nominal_gpu_milli(snap, anywhere) == 500  # compute share dominates


def test_runs_are_deterministic_per_seed_and_differ_across_seeds() -> None:
    sc = builtin_scenario()
    a = run_fill(sc.nodes, sc.requests, "fgd", FillConfig(seed=7))
    b = run_fill(sc.nodes, sc.requests, "fgd", FillConfig(seed=7))
    c = run_fill(sc.nodes, sc.requests, "fgd", FillConfig(seed=8))
    assert a.to_json() == b.to_json()
    assert a.to_json() != c.to_json()


def test_experiment_aggregates_means_over_seeds() -> None:
    sc = builtin_scenario()
    results = run_experiment(sc.nodes, sc.requests, ["best-fit", "random"], [1, 2])
    for agg in results.values():
        runs = agg["runs"]
        mean = np.mean([r["unallocated_gpu_pct_100"] for r in runs])
        assert agg["unallocated_gpu_pct_100"] == pytest.approx(mean, abs=1e-3)
        assert agg["seeds"] == [1, 2]
    # Packing beats random placement on a mixed pool.
    assert (
        results["best-fit"]["unallocated_gpu_pct_100"]
        < results["random"]["unallocated_gpu_pct_100"]
    )


def test_a_policy_built_by_the_caller_runs_as_its_name_does() -> None:
    # bench/decided_by.py passes its own policy object; built for the same workload, the
    # policy by name and the object must give the same run, under the policy's name.
    sc = builtin_scenario()
    config = FillConfig(seed=3)
    workload = TargetWorkload.from_requests(sc.requests, cutoff=config.popularity_cutoff)
    by_name = run_fill(sc.nodes, sc.requests, "gpupool", config)
    by_object = run_fill(sc.nodes, sc.requests, GpupoolPolicy(workload), config)
    assert by_object.policy == "gpupool"
    assert (by_object.placed, by_object.unallocated_gpu_pct) == (
        by_name.placed,
        by_name.unallocated_gpu_pct,
    )
    assert by_object.frag_rate_pct == by_name.frag_rate_pct
    assert by_name.placed > 0
