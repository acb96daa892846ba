"""The pure parts of bench/live_replay.py (bench/live_replay_core.py): a trace row becomes the
pod a user would write, the webhook reads back the request the simulator is given, the
simulator's in-order fill, and the latency percentiles."""

from __future__ import annotations

import numpy as np
import pytest
from support.bench import bench_module

from gpupool.adapters.wire.pods import read_pod_gpu
from gpupool.domain.devices import uniform_node
from gpupool.domain.requests import Request
from gpupool.domain.units import MiB
from gpupool.placement.workload import TargetWorkload

core = bench_module("live_replay_core")

NODES = [
    uniform_node("t4", cpu_milli=32000, memory_mib=131072, gpu_count=2, model="T4"),
    uniform_node("v100", cpu_milli=64000, memory_mib=262144, gpu_count=8, model="V100M32"),
    uniform_node("g2", cpu_milli=96000, memory_mib=393216, gpu_count=8, model="G2"),
]


def test_unknown_cards_get_the_stand_in_and_the_rest_stay() -> None:
    nodes = core.substitute_unknown(NODES, "A10")
    assert [n.gpus[0].model for n in nodes] == ["T4", "V100-32GB", "A10"]
    assert [(n.name, n.cpu_milli, len(n.gpus)) for n in nodes] == [
        (n.name, n.cpu_milli, len(n.gpus)) for n in NODES
    ]
    with pytest.raises(ValueError, match="no known memory"):
        core.substitute_unknown(NODES, "G3")


def test_a_share_is_sized_on_the_smallest_known_card() -> None:
    assert core.smallest_card_mib(NODES) == 15360  # T4; G2 has no size and is skipped
    task = Request(name="openb-pod-0001", cpu_milli=8000, memory_mib=30000, gpu_count=1,
                   gpu_milli=455)  # fmt: skip
    request = core.pod_request(task, "replay", 15360)
    assert request.gpu_memory_bytes == 455 * 15360 // 1000 * MiB
    assert request.compute_pct == 46  # rounded up: never less compute than the trace asked
    assert request.gpu_milli is None and request.tenant == "replay"


@pytest.mark.parametrize(
    "task",
    [
        Request(name="share", cpu_milli=4000, memory_mib=1000, gpu_count=1, gpu_milli=50),
        Request(name="whole", cpu_milli=4000, memory_mib=1000, gpu_count=1, gpu_milli=1000),
        Request(name="eight", cpu_milli=64000, memory_mib=0, gpu_count=8, gpu_milli=1000),
    ],
)
def test_the_webhook_reads_back_the_request_the_simulator_gets(task: Request) -> None:
    request = core.pod_request(task, "replay", 15360)
    pod = core.pod_manifest(request)
    assert pod["metadata"] == {"name": task.name, "namespace": "replay"}
    read = read_pod_gpu(pod, tenant="replay")
    assert read is not None
    got = read.request
    assert (got.gpu_count, got.gpu_milli, got.gpu_memory_bytes, got.compute_pct) == (
        request.gpu_count, request.gpu_milli, request.gpu_memory_bytes, request.compute_pct,
    )  # fmt: skip
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits["cpu"] == f"{task.cpu_milli}m"
    assert ("memory" in limits) == bool(task.memory_mib)


def test_a_cpu_only_task_asks_gpupool_for_nothing() -> None:
    task = Request(name="cpu", cpu_milli=2000, memory_mib=512)
    pod = core.pod_manifest(core.pod_request(task, "replay", 15360))
    assert read_pod_gpu(pod) is None
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"cpu": "2000m", "memory": "512Mi"}


def test_in_order_fill_places_until_full_and_measures_what_is_left() -> None:
    nodes = [uniform_node("a", cpu_milli=64000, memory_mib=65536, gpu_count=2, model="T4")]
    tasks = [
        Request(name="w1", cpu_milli=1000, gpu_count=1, gpu_milli=1000),
        Request(name="s1", cpu_milli=1000, gpu_count=1, gpu_milli=500),
        Request(name="w2", cpu_milli=1000, gpu_count=1, gpu_milli=1000),  # no whole card left
        Request(name="s2", cpu_milli=1000, gpu_count=1, gpu_milli=300),
    ]
    run = core.fill_in_order(nodes, tasks, "best-fit", TargetWorkload.from_requests(tasks))
    assert [name for name, _ in run.placed] == ["w1", "s1", "s2"]
    assert {node for _, node in run.placed} == {"a"}
    assert run.failed == ("w2",)
    assert run.unallocated_gpu_pct == pytest.approx(100 * (2000 - 1800) / 2000)
    assert run.unallocated_on_cards_pct == pytest.approx(run.unallocated_gpu_pct)


@pytest.mark.parametrize("q", [0, 1, 50, 90, 99, 100])
def test_percentile_is_numpys_linear_one(q: float) -> None:
    values = [0.9, 0.1, 0.5, 2.0, 0.3, 0.7, 1.1]
    assert core.percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_percentile_and_latency_refuse_or_skip_nothing() -> None:
    with pytest.raises(ValueError, match="no values"):
        core.percentile([], 50)
    with pytest.raises(ValueError, match="between 0 and 100"):
        core.percentile([1.0], 101)
    assert core.latency_ms([]) is None
    assert core.latency_ms([0.25, 0.75]) == {
        "count": 2, "p50_ms": 500.0, "p99_ms": 745.0, "max_ms": 750.0,
    }  # fmt: skip


def test_the_live_cluster_cards_keep_the_reserve_back_and_fit_less() -> None:
    """Two 7,065 MiB slices fit a whole T4 (15,360 MiB), not the 13,824 MiB the live cluster's
    T4 offers slices (the node's 10 % reserve): the simulator's figure beside the live one is
    taken on the live cards, and read against the whole cards either way."""
    nodes = [uniform_node("a", cpu_milli=64000, memory_mib=65536, gpu_count=1, model="T4")]
    [card] = core.with_reserve(nodes)[0].gpus
    assert card.memory_bytes == 13824 * MiB
    assert core.with_reserve(nodes, 0.0)[0].gpus[0].memory_bytes == 15360 * MiB
    slices = [Request(name=f"s{i}", gpu_count=1, gpu_memory_bytes=7065 * MiB) for i in (1, 2)]
    workload = TargetWorkload.from_requests(slices)
    whole = core.fill_in_order(nodes, slices, "best-fit", workload)
    live = core.fill_in_order(nodes, slices, "best-fit", workload, reserve_pct=10.0)
    assert [n for n, _ in whole.placed] == ["s1", "s2"] and whole.failed == ()
    assert [n for n, _ in live.placed] == ["s1"] and live.failed == ("s2",)
    assert live.unallocated_gpu_pct == pytest.approx(core.unallocated_gpu_pct(nodes, [slices[0]]))
