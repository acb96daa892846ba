"""bench/gpu_check.py, the real-GPU check, run against the fake driver.

On a machine without a GPU the check's driver part still runs: the fake libcuda.so.1 answers
cuInit and cuDeviceGetCount, so gpu_check.py takes it for a card and drives gp_drive through the
same steps it will on a real one. This keeps the script true to the code (a step gp_drive no
longer knows, or an answer the limiter no longer gives, fails here) without claiming anything about
NVIDIA's driver, which only a run on a GPU machine can.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.native

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "native" / "build"
CHECK = ROOT / "bench" / "gpu_check.py"


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    done = subprocess.run(
        ["make", "-s", "-C", str(ROOT / "native"), "all", "test-bins"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif(
    importlib.util.find_spec("torch") is not None,
    reason="PyTorch is installed: its part of the check needs a real GPU",
)
def test_the_gpu_checks_driver_part_passes_against_the_fake_driver() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPOOL_", "FAKE_"))}
    env.pop("LD_PRELOAD", None)
    env["LD_LIBRARY_PATH"] = str(BUILD / "fake")
    env["FAKE_CUDA_TOTAL_MEM"] = str(8 << 30)  # room for the check's 1Gi slice and its control
    done = subprocess.run(
        [sys.executable, str(CHECK), "--skip-bench"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = json.loads(done.stdout)
    failed = [c for c in report["checks"] if not c["ok"]]
    assert failed == [], failed
    assert report["status"] == "ok"
    names = [c["name"] for c in report["checks"]]
    assert any("VMM memory released while mapped" in n for n in names)
    assert any("default pool is charged to device 0" in n for n in names)
    assert done.returncode == 0
