"""bench/fill_divergence.py: live placements replayed through the simulator's planner say, pod by
pod, whether the live node was the planner's choice, a tie, a lower-scored node or one the model
finds the pod does not fit; and live_replay's placements file reads back."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.bench import bench_module

from gpupool.domain.devices import Gpu, Node
from gpupool.domain.requests import Request

divergence = bench_module("fill_divergence")
live_replay = bench_module("live_replay")

NODES = [
    Node("a", 8000, 1 << 16, (Gpu(0, "A100-80GB"),)),
    Node("b", 8000, 1 << 16, (Gpu(0, "A100-80GB"),)),
]
PODS = {
    "half-1": Request("half-1", cpu_milli=100, gpu_count=1, gpu_milli=500),
    "half-2": Request("half-2", cpu_milli=100, gpu_count=1, gpu_milli=500),
    "whole": Request("whole", cpu_milli=100, gpu_count=1, gpu_milli=1000),
    "cpu": Request("cpu", cpu_milli=100),
}


def test_the_planners_own_choices_replay_as_same_node() -> None:
    live = [("half-1", "a"), ("half-2", "a"), ("whole", "b")]
    final, placed, outcomes, misfits = divergence.replay_live(NODES, PODS, live)
    assert [r.name for r in placed] == ["half-1", "half-2", "whole"]
    assert outcomes["share"]["same_node"] == 2 and outcomes["whole_gpus"]["same_node"] == 1
    assert not misfits
    assert divergence.place_in_order(final, [PODS["cpu"]]) == [PODS["cpu"]]


def test_a_live_choice_the_planner_scores_lower_and_one_that_does_not_fit_are_told() -> None:
    # half-2 live on b: the planner packs it on a (half full); then whole on a: does not fit
    live = [("half-1", "a"), ("half-2", "b"), ("whole", "a"), ("unknown-pod", "a")]
    final, placed, outcomes, misfits = divergence.replay_live(NODES, PODS, live)
    assert outcomes["share"] == {
        "same_node": 1,
        "planner_scores_another_higher": 1,
        "... not its choice without them either": 1,  # without half-1: a, first by name
    }
    assert outcomes["whole_gpus"] == {"live_node_does_not_fit_in_model": 1}
    assert misfits == ["whole on a"]
    assert [r.name for r in placed] == ["half-1", "half-2"]
    # no card is whole any more: the whole-card pod the live fill did not place fits nowhere
    assert divergence.place_in_order(final, [PODS["whole"]]) == []


def test_placements_written_by_live_replay_read_back_in_binding_order(tmp_path: Path) -> None:
    tracker = live_replay.PodTracker()
    tracker.created = {"p1": 10.0, "p2": 10.5}
    tracker.bound = {"p2": (11.0, "b"), "p1": (12.5, "a")}
    path = tmp_path / "placements.jsonl"
    live_replay.write_placements(path, tracker)
    assert divergence.read_placements(path) == [("p2", "b"), ("p1", "a")]
    path.write_text('{"pod": "p1"}\n')
    with pytest.raises(SystemExit, match=r"placements\.jsonl:1: not a placement line"):
        divergence.read_placements(path)


def test_a_lower_choice_made_before_the_pod_bound_just_before_is_told_apart() -> None:
    """half-1 live on b (a tie with a), then half-2 on a: the planner packs it beside half-1
    on b, but without half-1 it would choose a: the extender chose before half-1 counted."""
    live = [("half-1", "b"), ("half-2", "a")]
    _, _, outcomes, _ = divergence.replay_live(NODES, PODS, live)
    assert outcomes["share"] == {
        "tie_other_node": 1,
        "planner_scores_another_higher": 1,
        "... its choice without the 1-8 pods bound just before": 1,
    }
