"""The limits file the device plugin writes is one the C limiter enforces, and the usage folder
it mounts is where the agent reads what the limiter counts (fake driver, no GPU)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from prometheus_client.core import Metric

from gpupool.adapters.metrics.agent import AgentReading, agent_metrics
from gpupool.cli.agent import leases_usage
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


def test_the_agent_reads_what_the_limiter_holds_per_slice(tmp_path: Path) -> None:
    """Allocate's usage folder is where the limiter keeps its accounting; the agent's /metrics
    reads from it the bytes the container holds on each card of its lease, and when it last
    allocated, and sees them go when the container's process ends."""
    cards = [f"GPU-fa4ec0de-0000-0000-0000-00000000000{d}" for d in (0, 1)]
    slices = tuple(Slice(d, uuid, "T4", 0, 64 * MiB, 0) for d, uuid in enumerate(cards))
    device_ids = (f"{cards[0]}::0", f"{cards[1]}::0")
    lease = PodLease("team/p", "team/p", "uid-p", "n1", slices, device_ids=device_ids)
    paths = PluginPaths(
        limits_host_dir=str(tmp_path / "limits"), usage_host_dir=str(tmp_path / "usage")
    )
    verdict = decide_allocation(
        node="n1",
        device_ids=list(device_ids),
        gpus=[Gpu(index=d, model="T4", uuid=uuid) for d, uuid in enumerate(cards)],
        leases=[lease],
        reserve_pct=10,
        paths=paths,
    )
    assert isinstance(verdict, Grant)
    mounts = {m.container_path: (m.host_path, m.read_only) for m in verdict.mounts}
    assert mounts[paths.usage_container] == (verdict.usage_host_path, False)
    Path(verdict.limits_host_path).parent.mkdir(parents=True)
    Path(verdict.limits_host_path).write_text(verdict.limits_text)
    Path(verdict.usage_host_path).mkdir(parents=True)
    shared = verdict.envs["GPUPOOL_SHARED_FILE"].replace(
        paths.usage_container, verdict.usage_host_path
    )  # outside a container the host folder stands in for the mount
    env = {
        **os.environ,
        "GPUPOOL_LIMITS_FILE": verdict.limits_host_path,
        "GPUPOOL_SHARED_FILE": shared,
        "LD_LIBRARY_PATH": str(FAKE_DRIVER),
        "LD_PRELOAD": str(LIMITER),
        "FAKE_CUDA_DEVICES": "2",
    }
    before = time.time()
    holder = subprocess.Popen(
        [str(DRIVE), "alloc", "40Mi", "ctx", "1", "alloc", "8Mi", "ready", "wait"],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        lines = [holder.stdout.readline().strip() for _ in range(4)]
        assert lines[-1] == "READY", lines
        after = time.time()
        usage = leases_usage(tmp_path / "usage", (lease,))
        metrics = samples(agent_metrics(AgentReading("n1", (), (), (lease,), usage)))
        used = {
            dict(labels)["UUID"]: value
            for (name, labels), value in metrics.items()
            if name == "gpupool_agent_lease_memory_used_bytes"
        }
        assert used == {cards[0]: 40 * MiB, cards[1]: 8 * MiB}
        (active,) = (
            v for (n, _), v in metrics.items()
            if n == "gpupool_agent_lease_last_activity_timestamp_seconds"
        )  # fmt: skip
        assert before - 1 <= active <= after + 1  # the clock's granularity, not a duration
    finally:
        holder.communicate("go\n", timeout=60)
    # the process exited: its entry is gone, and with it the bytes
    assert leases_usage(tmp_path / "usage", (lease,))["team/p"].used_bytes[:2] == (0, 0)


def samples(families: list[Metric]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in families
        for s in family.samples
    }
