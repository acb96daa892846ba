"""The limits file the device plugin writes is one the C limiter enforces (fake driver, no GPU)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gpupool.domain.allocations import Slice
from gpupool.domain.devices import Gpu
from gpupool.domain.units import MiB
from gpupool.node.device_plugin.decide import Grant, PluginPaths, decide_allocation
from gpupool.ports import PodLease

NATIVE = Path(__file__).resolve().parents[2] / "native" / "build"
LIMITER = NATIVE / "libgpupool.so"
DRIVE = NATIVE / "tests" / "gp_drive"
FAKE_DRIVER = NATIVE / "fake"
CARD = "GPU-fa4ec0de-0000-0000-0000-000000000000"  # the fake libcuda's device 0

pytestmark = [
    pytest.mark.native,
    pytest.mark.skipif(
        not (LIMITER.exists() and DRIVE.exists() and (FAKE_DRIVER / "libcuda.so.1").exists()),
        reason="native limiter and its fake driver are not built (make -C native test-bins)",
    ),
]


@pytest.mark.parametrize("compute_pct", [0, 30])
def test_limiter_enforces_the_plugins_limits_file(tmp_path: Path, compute_pct: int) -> None:
    lease = PodLease(
        lease="team/p",
        pod="team/p",
        pod_uid="uid-p",
        node="n1",
        slices=(Slice(0, CARD, "T4", 0, 64 * MiB, compute_pct * 10),),
    )
    verdict = decide_allocation(
        node="n1",
        device_ids=[f"{CARD}::0"],
        gpus=[Gpu(index=0, model="T4", uuid=CARD)],
        leases=[lease],
        reserve_pct=10,
        paths=PluginPaths(limits_host_dir=str(tmp_path)),
    )
    assert isinstance(verdict, Grant)
    Path(verdict.limits_host_path).write_text(verdict.limits_text)
    env = {
        **os.environ,
        # outside a container the host path stands in for the read-only mount
        "GPUPOOL_LIMITS_FILE": verdict.limits_host_path,
        "GPUPOOL_SHARED_FILE": str(tmp_path / "usage"),
        "LD_LIBRARY_PATH": str(FAKE_DRIVER),
        "LD_PRELOAD": str(LIMITER),
    }
    out = subprocess.run(
        [str(DRIVE), "alloc", "40Mi", "alloc", "40Mi", "info"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.splitlines()
    assert out[0] == "alloc rc=0 id=0"
    assert out[1] == "alloc rc=2 id=1"  # CUDA_ERROR_OUT_OF_MEMORY past the slice
    assert out[2] == f"info rc=0 free={24 * MiB} total={64 * MiB}"
