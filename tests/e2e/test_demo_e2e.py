"""`gpupool demo` (`make demo`) as a person runs it: it brings up the dev cluster with gpupool and
the web view, prints the web view's URL and `gpupool status` after the first step, and Ctrl-C
takes everything down: no process of the cluster is left running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from support.waiting import wait_until

from gpupool.devcluster import DevCluster
from gpupool.devcluster.processes import is_running

pytestmark = pytest.mark.e2e


def test_the_demo_shows_the_pool_and_ctrl_c_leaves_nothing_running(tmp_path: Path) -> None:
    state_dir = tmp_path / "demo"
    demo = subprocess.Popen(
        [sys.executable, "-m", "gpupool.cli.main", "demo", "--dir", str(state_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "NO_PROXY": "127.0.0.1,localhost"},
    )
    lines: list[str] = []
    assert demo.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(demo.stdout or ()), daemon=True)
    reader.start()
    try:
        wait_until(
            lambda: any("TENANT" in line for line in lines) or demo.poll() is not None,
            180,
            "the demo's first status",
        )
        assert demo.poll() is None, "".join(lines)
        state = DevCluster(state_dir).load_state()
        assert state is not None and state.web_url
        recorded = list(state.processes)
        assert {"gpupool-web", "gpupool-extender", "gpupool-controller"} <= {
            p.name for p in recorded
        }
        text = "".join(lines)
        assert f"web view: {state.web_url}" in text
        assert "step at 0s" in text and "POOL  2 nodes, 8 cards" in text
        for tenant in ("search", "lab", "research", "ads"):
            assert f"\n{tenant} " in text, text
    finally:
        demo.send_signal(signal.SIGINT)
        code = demo.wait(timeout=120)
        reader.join(timeout=10)
    text = "".join(lines)
    assert code == 0, text
    assert "interrupted" in text and "stopped: gpupool-heartbeat, gpupool-web" in text, text
    assert "Traceback" not in text
    left = [f"{p.name} ({p.pid})" for p in recorded if is_running(p)]
    assert not left, f"still running after Ctrl-C: {left}"
