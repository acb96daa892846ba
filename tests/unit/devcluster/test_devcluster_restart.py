"""`gpupool dev-cluster restart COMPONENT`: the new process replaces the old one in state.json,
so `down` stops it; an unknown name is refused with the list of components."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpupool.devcluster import DevCluster
from gpupool.devcluster.errors import ClusterNotRunning, UnknownComponent
from gpupool.devcluster.processes import is_running, start, stop
from gpupool.devcluster.spec import ClusterState


def _cluster_with(tmp_path: Path, names: list[str]) -> DevCluster:
    cluster = DevCluster(tmp_path / "state")
    cluster.state_dir.mkdir()
    records = [
        start(n, ["sleep", "300"], cluster.log_dir / f"{n}.log", cwd=cluster.state_dir)
        for n in names
    ]
    state = ClusterState(state_dir=str(cluster.state_dir), processes=records)
    cluster.state_path.write_text(json.dumps(state.to_json()))
    return cluster


def test_restart_replaces_the_process_and_down_stops_the_new_one(tmp_path: Path) -> None:
    cluster = _cluster_with(tmp_path, ["etcd", "kwok"])
    old = {p.name: p for p in cluster.status()}
    stop(cluster.load_state().processes[1])  # type: ignore[union-attr]  # kwok died
    new = cluster.restart("kwok")
    state = cluster.load_state()
    assert state is not None
    assert [p.name for p in state.processes] == ["etcd", "kwok"]
    assert state.processes[1] == new and new.pid != old["kwok"].pid
    assert is_running(new)
    assert state.processes[0].pid == old["etcd"].pid  # the others are left alone
    assert cluster.down() == ["kwok", "etcd"]
    assert not is_running(new)


def test_restart_of_a_running_component_stops_the_old_process(tmp_path: Path) -> None:
    cluster = _cluster_with(tmp_path, ["kwok"])
    before = cluster.load_state().processes[0]  # type: ignore[union-attr]
    after = cluster.restart("kwok")
    assert not is_running(before) and is_running(after)
    cluster.down()


def test_restart_names_the_components_when_the_name_is_unknown(tmp_path: Path) -> None:
    cluster = _cluster_with(tmp_path, ["etcd", "kwok"])
    with pytest.raises(UnknownComponent, match=r"'kubelet' is not a component .*: etcd, kwok"):
        cluster.restart("kubelet")
    cluster.down()


def test_restart_without_a_cluster_says_how_to_start_one(tmp_path: Path) -> None:
    with pytest.raises(ClusterNotRunning, match="gpupool dev-cluster up"):
        DevCluster(tmp_path / "none").restart("kwok")
