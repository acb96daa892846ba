"""Soft model preferences in the simulator: a scenario's `prefer-gpu-model` and
`avoid-gpu-model` steer its tasks on a mixed pool, and no task is refused for them."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from gpupool.placement import ClusterSnapshot, Decision, Planner, TargetWorkload
from gpupool.simulator.replay_placement import place
from gpupool.simulator.scenario import load_scenario

CLUSTER = """
cluster:
  - {name: a100, count: 2, cpu: 64, memory: 512Gi, gpus: 4xA100-80GB}
  - {name: t4, count: 2, cpu: 64, memory: 512Gi, gpus: 4xT4}
workload:
"""


def placed_on(tmp_path: Path, workload: str) -> Counter[str]:
    """Place the scenario's tasks in order, as the replay does; the model each one got (or
    "refused")."""
    path = tmp_path / "s.yaml"
    path.write_text(CLUSTER + workload, encoding="utf-8")
    scenario = load_scenario(path)
    snap = ClusterSnapshot(scenario.nodes)
    planner = Planner("gpupool", TargetWorkload.from_requests(scenario.requests))
    models: Counter[str] = Counter()
    for req in scenario.requests:
        result = place(planner, snap, req)
        if isinstance(result, Decision):
            snap.assume(result)
            models[snap.nodes[result.node_index].gpus[result.cards[0]].model] += 1
        else:
            models["refused"] += 1
    return models


def test_preferred_model_fills_first_then_the_rest_lands_elsewhere(tmp_path: Path) -> None:
    # 8 T4 cards hold 32 quarter-card notebooks; the 8 more go to the A100s, none refused
    plain = placed_on(tmp_path, "  - {name: nb, count: 40, cpu: 1, gpu-share: 250}\n")
    preferred = placed_on(
        tmp_path, "  - {name: nb, count: 40, cpu: 1, gpu-share: 250, prefer-gpu-model: T4}\n"
    )
    assert preferred == Counter({"T4": 32, "A100-80GB": 8})
    assert plain["T4"] < 32 and "refused" not in plain


def test_avoided_model_takes_only_what_the_others_cannot(tmp_path: Path) -> None:
    avoided = placed_on(
        tmp_path,
        "  - {name: inf, count: 12, cpu: 1, gpu-memory: 12Gi, avoid-gpu-model: A100-80GB}\n",
    )
    # one 12Gi slice per 15Gi T4 card: 8 on the T4s, the 4 left on the avoided A100s
    assert avoided == Counter({"T4": 8, "A100-80GB": 4})
    plain = placed_on(tmp_path, "  - {name: inf, count: 12, cpu: 1, gpu-memory: 12Gi}\n")
    assert plain["A100-80GB"] > 4  # without the avoidance the policy packs the A100s
