"""A process the real node's teardown killed counts as gone once it is dead, zombie or not: a
container whose shim was killed is a zombie until whoever inherits it reaps it, and nothing of
it is left to stop (`host.is_dead`, used by the teardown's wait and the host snapshot)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gpupool.devcluster.realnode import host
from gpupool.devcluster.realnode.teardown import wait_dead


def test_a_running_process_is_not_dead_a_zombie_and_a_reaped_one_are() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)  # fmt: skip
    try:
        assert not host.is_dead(child.pid)
        assert wait_dead([child.pid], timeout_s=0.2) == [child.pid]
        assert child.stdin is not None
        child.stdin.close()  # it exits; not reaped yet, so a zombie
        assert wait_dead([child.pid], timeout_s=10) == []
        stat = Path(f"/proc/{child.pid}/stat").read_text()
        state = stat.rsplit(")", 1)[-1].split()[0]
        assert state == "Z"
        assert host.is_dead(child.pid)
    finally:
        child.wait()
    assert host.is_dead(child.pid)
    assert not host.is_dead(os.getpid())
