"""The replay on the real `default` trace: what the README reports must keep holding."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupool.simulator.openb import load_nodes, load_pods
from gpupool.simulator.replay_experiment import ReplayConfig, run_experiment

TRACE = Path(__file__).resolve().parents[4] / "shared" / "traces" / "alibaba-gpu-v2023"

pytestmark = pytest.mark.trace


@pytest.mark.skipif(not (TRACE / "openb_pod_list_default.csv").exists(), reason="trace absent")
def test_pooling_and_borrowing_help_on_the_default_trace() -> None:
    nodes = load_nodes(TRACE / "openb_node_list_gpu_node.csv")
    pods = load_pods(TRACE / "openb_pod_list_default.csv")
    result = run_experiment(nodes, pods, None, ReplayConfig())
    runs = {mode: stats.to_json() for mode, stats in result.runs.items()}
    whole, pooled, borrow = runs["whole-card"], runs["pooled"], runs["pooled-borrowing"]
    assert pooled["gpu_allocation_pct_mean"] > whole["gpu_allocation_pct_mean"]
    assert pooled["queue_delay_s_p95"] < whole["queue_delay_s_p95"]
    assert borrow["gpu_allocation_pct_mean"] >= pooled["gpu_allocation_pct_mean"]
    assert borrow["queue_delay_s_p95"] < pooled["queue_delay_s_p95"]
    assert borrow["borrowed_gpu_hours"] > 0
    assert whole["borrowed_gpu_hours"] == pooled["borrowed_gpu_hours"] == 0
    for run in runs.values():
        assert run["admitted"] + run["rejected"] == len(pods)
