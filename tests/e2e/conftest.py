"""The e2e fixtures: one real dev cluster per test session, one namespace per test; and, for the
tests of the whole product, one session cluster running all of gpupool (`gpupool_cluster`).

The cluster runs from a temporary state folder, so it never touches a developer's own
`gpupool dev-cluster`. Its components die with the test process (PR_SET_PDEATHSIG) even if
pytest is killed. When an e2e test fails, or the cluster cannot start, the component logs are
copied to build/e2e-artifacts/<time>/ (or $GPUPOOL_E2E_ARTIFACTS) and the path is printed.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpupool.devcluster import ClusterSpec, DevCluster, DevClusterError
from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.binaries import Binaries
from gpupool.devcluster.nodes import GpuSpec, node_specs, parse_gpu_spec
from gpupool.devcluster.processes import is_running
from gpupool.devcluster.spec import ClusterState, GpupoolSpec

E2E_NODES = 4
E2E_GPUS = "8xA100-80GB"
# The full-stack cluster's node health runs on short times so a lost node shows within seconds.
# GPUPOOL_E2E_CONTROLLER_RESYNC=300: the controller's default safety net instead of 1 s (only
# changes and the loops' own deadlines start rounds).
FULL_STACK = GpupoolSpec(
    heartbeat_s=1.0,
    controller_resync_s=float(os.environ.get("GPUPOOL_E2E_CONTROLLER_RESYNC", "1")),
    suspect_after_s=5.0,
    lost_after_s=10.0,
)
REPO = Path(__file__).resolve().parents[2]

_failed_e2e: list[str] = []
_kept_logs: list[Path] = []


@dataclass(frozen=True)
class E2ECluster:
    """What an e2e test gets: the cluster, its state, an admin API client and the binaries."""

    cluster: DevCluster
    state: ClusterState
    api: KubeApi
    binaries: Binaries
    gpus: GpuSpec

    @property
    def kubeconfig(self) -> Path:
        return Path(self.state.kubeconfig)


def _artifacts_root() -> Path:
    return Path(os.environ.get("GPUPOOL_E2E_ARTIFACTS", REPO / "build" / "e2e-artifacts"))


def _keep_logs(cluster: DevCluster, why: str) -> None:
    target = _artifacts_root() / f"{time.strftime('%Y%m%d-%H%M%S')}-{why}"
    target.mkdir(parents=True, exist_ok=True)
    for log in cluster.logs():
        shutil.copy2(log, target / log.name)
    for extra in ("scheduler.yaml", "state.json"):
        if (cluster.state_dir / extra).exists():
            shutil.copy2(cluster.state_dir / extra, target / extra)
    _kept_logs.append(target)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed and item.get_closest_marker("e2e") is not None:
        _failed_e2e.append(item.nodeid)
    return report


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for path in _kept_logs:
        terminalreporter.write_line(f"dev cluster component logs kept in {path}")


def _session_cluster(root: Path, gpupool: GpupoolSpec | None, tag: str) -> Iterator[E2ECluster]:
    """E2E_NODES fake GPU nodes (and gpupool on top when `gpupool` is given), up until the
    session ends; component logs kept under `tag` on a failed start or a failed e2e test."""
    cluster = DevCluster(root)
    gpus = parse_gpu_spec(E2E_GPUS)
    spec = ClusterSpec(nodes=tuple(node_specs(E2E_NODES, gpus)), gpupool=gpupool)
    try:
        state = cluster.up(spec, die_with_parent=True)
    except DevClusterError:
        _keep_logs(cluster, "startup")
        raise
    try:
        binaries = Binaries.locate(Path(state.bin_dir))
        yield E2ECluster(cluster, state, cluster.api(), binaries, gpus)
    finally:
        cluster.down()
        if _failed_e2e:
            _keep_logs(cluster, tag)
        left = [f"{p.name} (pid {p.pid})" for p in state.processes if is_running(p)]
        assert not left, f"dev cluster processes still running after down: {left}"


@pytest.fixture(scope="session")
def dev_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2ECluster]:
    """A real control plane with E2E_NODES fake GPU nodes, up for the whole session."""
    yield from _session_cluster(tmp_path_factory.mktemp("dev-cluster"), None, "failed")


@pytest.fixture(scope="session")
def gpupool_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2ECluster]:
    """`gpupool dev-cluster up` as a user gets it: the control plane and E2E_NODES fake GPU nodes
    with the CRDs, extender, webhook (every namespace but kube-system), controller and GpuNode
    heartbeats as processes (settings in FULL_STACK). Up for the whole session."""
    root = tmp_path_factory.mktemp("gpupool-cluster")
    yield from _session_cluster(root, FULL_STACK, "failed-gpupool")


def _namespace_name(test_name: str) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", test_name.lower()).strip("-")[:40].strip("-")
    return f"{base or 't'}-{secrets.token_hex(3)}"


@pytest.fixture
def namespace(dev_cluster: E2ECluster, request: pytest.FixtureRequest) -> str:
    """A fresh namespace for this test. Never deleted: the cluster is thrown away after the
    session, and a namespace's termination would only add work to every later test."""
    name = _namespace_name(request.node.name)
    dev_cluster.api.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
    )
    return name
