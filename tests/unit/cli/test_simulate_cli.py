"""`gpupool simulate`: outputs, and clear errors for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpupool.cli.main import main

NODES = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
    f"n{i},32000,131072,4,T4\n" for i in range(4)
)
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(
    f"p{i},2000,1024,1,{(250, 500, 1000)[i % 3]}\n" for i in range(30)
)


@pytest.fixture
def trace(tmp_path: Path) -> tuple[Path, Path]:
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    nodes.write_text(NODES)
    pods.write_text(PODS)
    return nodes, pods


def test_fill_writes_json_with_the_documented_keys_and_a_plot(
    trace: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, plot = tmp_path / "r.json", tmp_path / "r.png"
    code = main(
        [
            "simulate",
            "fill",
            "--nodes",
            str(trace[0]),
            "--pods",
            str(trace[1]),
            "--policy",
            "fgd,best-fit",
            "--policy",
            "gpupool",
            "--seeds",
            "42-43",
            "--jobs",
            "1",
            "--json",
            str(out),
            "--plot",
            str(plot),
        ]
    )
    assert code == 0
    data = json.loads(out.read_text())
    assert set(data["results"]) == {"fgd", "best-fit", "gpupool"}
    for agg in data["results"].values():
        for key in (
            "unallocated_gpu_pct_100",
            "unallocated_gpu_pct_130",
            "frag_rate_pct_80",
            "frag_amount_pct_80",
        ):
            assert key in agg
        assert [r["seed"] for r in agg["runs"]] == [42, 43]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "unalloc GPU %" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--policy", "tetris"], "unknown policy 'tetris'"),
        (["--seeds", "51-42"], "--seeds must look like 42-51"),
        (["--seeds", "x"], "--seeds must look like 42-51"),
    ],
)
def test_fill_argument_errors(
    trace: tuple[Path, Path], extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["simulate", "fill", "--nodes", str(trace[0]), "--pods", str(trace[1]), *extra])
    assert code == 2
    assert message in capsys.readouterr().err


def test_fill_needs_both_files(
    trace: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "fill", "--nodes", str(trace[0])]) == 2
    assert "fill needs --nodes NODES.csv and --pods PODS.csv" in capsys.readouterr().err


def test_bad_trace_file_is_reported_with_its_location(
    trace: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,abc\n")
    assert main(["simulate", "fill", "--nodes", str(trace[0]), "--pods", str(bad)]) == 2
    assert "bad.csv:2: column gpu_milli: invalid value 'abc'" in capsys.readouterr().err


def test_builtin_scenario_through_the_console_script(tmp_path: Path) -> None:
    gpupool = Path(sys.executable).parent / "gpupool"
    proc = subprocess.run(
        [str(gpupool), "simulate", "--seeds", "42", "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "o" / "simulate.json").read_text())
    assert {
        "gpupool",
        "fgd",
        "best-fit",
        "random",
        "binpack",
        "spread",
        "dot-product",
        "gpu-packing",
        "gpu-clustering",
    } == set(data["results"])
    assert (tmp_path / "o" / "simulate.png").stat().st_size > 10_000
    assert "built-in mixed pool" in proc.stderr
