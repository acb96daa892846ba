"""`gpupool defrag plan` and `gpupool simulate replay --defrag`: outputs, and exit 2 with a clear
message for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpupool.cli.main import main

NODES = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
    f"n{i},32000,131072,2,T4\n" for i in range(2)
)
HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
HEADER += "creation_time,deletion_time,scheduled_time\n"


def row(name: str, milli: int, at: int, run: int) -> str:
    return f"{name},1000,1024,1,{milli},,LS,Succeeded,{at},{at + run},{at}\n"


# Sixteen quarter slices fill the four cards; three of every four leave, so each card keeps
# one; then whole-card pods arrive (the same story as the replay's unit test).
PODS = HEADER + "".join(row(f"q{k}", 250, k, 20 if k % 4 else 1000) for k in range(16))
PODS += "".join(row(f"w{k}", 1000, 37 + k, 100) for k in range(3)) + row("late", 250, 50, 1)


@pytest.fixture
def trace(tmp_path: Path) -> list[str]:
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    nodes.write_text(NODES)
    pods.write_text(PODS)
    return ["--nodes", str(nodes), "--pods", str(pods), "--time-scale", "1"]


def test_plan_prints_the_moves_and_writes_json(
    trace: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan.json"
    args = ["defrag", "plan", *trace, "--cluster-fraction", "1", "--threshold", "10"]
    assert main([*args, "--at", "40.5", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "3 moves fix 3 cards" in text
    data = json.loads(out.read_text())
    assert len(data["moves"]) == 3
    assert data["pool_fragmentation_pct_after"] < data["pool_fragmentation_pct_before"]
    assert {"pod", "priority", "bytes", "from", "to"} <= set(data["moves"][0])


def test_replay_with_defrag_reports_both_runs(
    trace: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    args = ["simulate", "replay", *trace, "--cluster-fraction", "1", "--policy", "best-fit"]
    assert main([*args, "--defrag", "10,5", "--json", str(out), "--plot", str(png)]) == 0
    runs = json.loads(out.read_text())["runs"]
    assert set(runs) == {
        "whole-card",
        "pooled",
        "pooled+defrag",
        "pooled-borrowing",
        "pooled-borrowing+defrag",
    }
    assert runs["pooled+defrag"]["defrag_moves"] > 0 == runs["pooled"]["defrag_moves"]
    assert runs["pooled"]["fragmentation_timeline"]
    assert png.stat().st_size > 0
    assert "frag % (peak)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["defrag", "plan", "--threshold", "150"], "percentage of a card's memory from 0 to 100"),
        (["defrag", "plan", "--threshold", "-1"], "from 0 to 100"),
        (["defrag", "plan", "--threshold", "10", "--max-moves", "0"], "1 or more"),
        (["defrag", "plan", "--threshold", "10", "--at", "-5"], "--at is a replay time"),
        (["simulate", "replay", "--defrag", "120,60"], "from 0 to 100"),
        (["simulate", "replay", "--defrag", "20,0"], "positive number of seconds"),
        (["simulate", "replay", "--defrag", "20,soon"], "number of seconds such as 300"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(
    trace: list[str], argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, *trace]) == 2
    assert words in capsys.readouterr().err


def test_inputs_must_be_a_trace_or_the_builtin_pool(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["defrag", "plan", "--threshold", "10", "--nodes", "x.csv"]) == 2
    assert "--nodes NODES.csv and --pods PODS.csv (or --builtin)" in capsys.readouterr().err
    assert main(["defrag", "plan", "--threshold", "10", "--builtin", "--nodes", "x"]) == 2
    assert "not both" in capsys.readouterr().err


def test_without_a_simulator_state_it_plans_on_the_live_cluster_and_says_when_it_cannot_reach_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    assert main(["defrag", "plan", "--threshold", "10", "--kubeconfig", str(config)]) == 2
    err = capsys.readouterr().err
    assert "gpupool defrag plan: reading the cluster failed" in err and "Traceback" not in err


def test_live_without_a_threshold_or_a_pool_says_what_to_give(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    assert main(["defrag", "plan", "--kubeconfig", str(config)]) == 2
    err = capsys.readouterr().err
    assert "give --threshold, or --pool naming a GpuPool" in err
