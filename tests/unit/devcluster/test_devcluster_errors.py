"""The dev cluster's errors, provoked with stand-in executables (no real binary needed):
a missing binary, a taken port, a component that dies at start. Each must leave no process."""

from __future__ import annotations

import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpupool.devcluster import (
    BinaryMissing,
    ClusterSpec,
    ComponentNotReady,
    DevCluster,
    PortTaken,
)
from gpupool.devcluster.binaries import COMPONENTS
from gpupool.devcluster.processes import is_running
from gpupool.devcluster.spec import Ports


def _fake_bin(folder: Path, scripts: dict[str, str]) -> Path:
    folder.mkdir()
    for name in COMPONENTS:
        path = folder / name
        path.write_text("#!/bin/sh\n" + scripts.get(name, "exec sleep 300\n"))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return folder


@pytest.fixture
def listener() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_missing_binary_names_the_build_command(tmp_path: Path) -> None:
    cluster = DevCluster(tmp_path / "state", tmp_path / "empty")
    with pytest.raises(BinaryMissing, match=r"etcd not found in .*make k8s"):
        cluster.up(ClusterSpec())


def test_taken_port(tmp_path: Path, listener: int) -> None:
    cluster = DevCluster(tmp_path / "state", _fake_bin(tmp_path / "bin", {}))
    with pytest.raises(PortTaken, match=f"127.0.0.1:{listener} is already in use"):
        cluster.up(ClusterSpec(ports=Ports(apiserver=listener)))
    assert cluster.status() == []


def test_component_that_exits_shows_its_log_and_nothing_is_left(tmp_path: Path) -> None:
    scripts = {"etcd": "echo 'etcdmain: listen tcp: bind: the sky fell' >&2\nexit 1\n"}
    cluster = DevCluster(tmp_path / "state", _fake_bin(tmp_path / "bin", scripts))
    with pytest.raises(ComponentNotReady) as caught:
        cluster.up(ClusterSpec(ready_timeout_s=10))
    assert caught.value.component == "etcd"
    assert "the sky fell" in str(caught.value)
    state = cluster.load_state()
    assert state is not None
    names = [p.name for p in state.processes]
    assert names == ["etcd", "kube-apiserver"]
    assert not any(is_running(p) for p in state.processes)


def test_component_that_never_gets_ready_times_out(tmp_path: Path) -> None:
    cluster = DevCluster(tmp_path / "state", _fake_bin(tmp_path / "bin", {}))
    with pytest.raises(ComponentNotReady, match=r"etcd did not become ready: not ready after"):
        cluster.up(ClusterSpec(ready_timeout_s=0.5))
    state = cluster.load_state()
    assert state is not None
    assert not any(is_running(p) for p in state.processes)
    assert cluster.down() == []
