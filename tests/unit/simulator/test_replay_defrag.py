"""Defragmentation in the replay: rounds move slices as restarts, fragmentation is tracked with
and without, and bad `--defrag` values are typed errors."""

from __future__ import annotations

import pytest

from gpupool.domain.devices import uniform_node
from gpupool.domain.requests import Request
from gpupool.placement.defrag import InvalidDefragThreshold
from gpupool.quota.resource import Resource
from gpupool.quota.spec import TenantQuota
from gpupool.simulator.openb import TracePod
from gpupool.simulator.replay_defrag import InvalidDefragInterval, ReplayDefrag
from gpupool.simulator.replay_experiment import ReplayConfig, run_experiment, state_at
from gpupool.simulator.tenancy import Tenancy, TenantRule

NODES = [
    uniform_node(f"n{i}", cpu_milli=64000, memory_mib=262144, gpu_count=2, model="T4")
    for i in range(2)
]
TENANCY = Tenancy(
    rules=(TenantRule(TenantQuota(name="t", nominal=4000, resource=Resource.GPU), None),)
)


def pod(name: str, milli: int, at: float, run: float) -> TracePod:
    return TracePod(
        request=Request(name=name, cpu_milli=1000, gpu_count=1, gpu_milli=milli),
        creation_time=at,
        deletion_time=at + run,
        scheduled_time=at,
        qos="LS",
    )


def churn() -> list[TracePod]:
    """Four quarter slices fill card by card (spread by best fit); three of every four leave
    early, leaving each card with one slice; whole-card pods then arrive and wait."""
    pods = [pod(f"q{k}", 250, float(k), 20.0 if k % 4 else 1000.0) for k in range(16)]
    pods += [pod(f"w{k}", 1000, 37.0 + k, 100.0) for k in range(3)]
    return [*pods, pod("late", 250, 50.0, 1.0)]  # the arrival window runs on to 50 s


def config(defrag: str | None) -> ReplayConfig:
    return ReplayConfig(
        policy="best-fit",
        time_scale=1.0,
        cluster_fraction=1.0,
        modes=("pooled",),
        defrag=None if defrag is None else ReplayDefrag.parse(defrag),
    )


def test_defragmentation_packs_the_leftovers_so_whole_card_pods_start_sooner() -> None:
    runs = run_experiment(NODES, churn(), TENANCY, config("10,5")).to_json()["runs"]
    assert isinstance(runs, dict)
    plain, defrag = runs["pooled"], runs["pooled+defrag"]
    assert plain["defrag_moves"] == plain["defrag_rounds"] == 0
    assert defrag["defrag_rounds"] > 0
    assert defrag["defrag_moves"] == 3  # three lone slices join the fourth card
    assert defrag["defrag_restart_gpu_hours"] > 0  # a move restarts the pod: its work is lost
    assert defrag["fragmentation_pct_mean"] < plain["fragmentation_pct_mean"]
    assert defrag["queue_delay_s_p95"] < plain["queue_delay_s_p95"]
    assert defrag["admitted"] == plain["admitted"] == len(churn())
    timeline = defrag["fragmentation_timeline"]
    assert isinstance(timeline, list) and len(timeline) > 10


def test_a_plan_over_a_stopped_replay_leaves_its_state_alone() -> None:
    engine = state_at(NODES, churn(), TENANCY, config(None), "pooled", at=40.5)
    before = engine.snap.state_key()
    plan = engine.plan_defrag(ReplayDefrag.parse("10").rules)
    assert len(plan.moves) == 3 and len(plan.cleared) == 3
    assert plan.pool_after < plan.pool_before
    assert engine.snap.state_key() == before


@pytest.mark.parametrize(
    ("text", "error", "words"),
    [
        ("101", InvalidDefragThreshold, "from 0 to 100"),
        ("-5,60", InvalidDefragThreshold, "from 0 to 100"),
        ("ten", InvalidDefragThreshold, "percentage from 0 to 100 such as 20"),
        ("20,0", InvalidDefragInterval, "positive number of seconds"),
        ("20,-60", InvalidDefragInterval, "positive number of seconds"),
        ("20,soon", InvalidDefragInterval, "number of seconds such as 300"),
        ("20,", InvalidDefragInterval, "interval after the comma is missing"),
        ("20,inf", InvalidDefragInterval, "positive number of seconds"),
    ],
)
def test_bad_defrag_values_are_typed_errors(text: str, error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=words):
        ReplayDefrag.parse(text)


def test_rounds_fall_every_interval_inside_the_arrival_window() -> None:
    assert ReplayDefrag.parse("10,30").round_times(0.0, 100.0) == [30.0, 60.0, 90.0]


def test_a_byte_slice_moved_to_a_smaller_card_is_charged_there_not_refused() -> None:
    """The built-in day with defragmentation moves byte slices between card sizes (T4 to
    RTX 3090, A100 to T4): a move is re-admitted for the most the slice may hold, as admission
    would admit it, so its new lease's larger milli-GPU charge is no ChargeMismatch."""
    from gpupool.simulator.builtin import builtin_scenario
    from gpupool.simulator.builtin_timeline import builtin_tenancy, builtin_timeline

    nodes = list(builtin_scenario().nodes)
    cfg = ReplayConfig(
        policy="gpupool",
        time_scale=1.0,
        cluster_fraction=1.0,
        modes=("pooled",),
        defrag=ReplayDefrag.parse("50"),
    )
    runs = run_experiment(nodes, builtin_timeline(), builtin_tenancy(nodes), cfg).to_json()
    moved = runs["runs"]["pooled+defrag"]
    assert moved["defrag_moves"] > 0
