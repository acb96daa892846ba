"""What `gpupool dev-cluster up` is asked for (`ClusterSpec`, `GpupoolSpec`, `Ports`) and what it
records in the state folder's state.json (`ClusterState`), apart from the code that does it
(`cluster.DevCluster`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpupool.devcluster.nodes import FakeNodeSpec
from gpupool.devcluster.ports import LOOPBACK
from gpupool.devcluster.processes import ProcessRecord
from gpupool.devcluster.realnode.node import HostBefore, RealNodeSpec
from gpupool.devcluster.scheduler_config import ExtenderConfig
from gpupool.domain.heartbeat import DEFAULT_HEARTBEAT_S


@dataclass(frozen=True, slots=True)
class Ports:
    """Fixed ports; None means: pick a free one."""

    etcd: int | None = None
    etcd_peer: int | None = None
    apiserver: int | None = None
    controller_manager: int | None = None
    scheduler: int | None = None
    kwok: int | None = None


@dataclass(frozen=True, slots=True)
class GpupoolSpec:
    """gpupool's own components on the dev cluster (`ClusterSpec.gpupool`; None: a bare cluster).

    `run_extender=False` keeps the extender out (e.g. when `ClusterSpec.extender` points at one
    the user runs). The times are the controller's node-health flags (None: its defaults).
    `run_web`: the web view (`gpupool web --dev-insecure`, its URL in `ClusterState.web_url`).
    """

    policy: str = "gpupool"
    run_extender: bool = True
    heartbeat_s: float = DEFAULT_HEARTBEAT_S  # the real agent's
    controller_resync_s: float = 300.0
    suspect_after_s: float | None = None
    lost_after_s: float | None = None
    log_level: str = "INFO"
    run_web: bool = True


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    nodes: tuple[FakeNodeSpec, ...] = ()
    extender: ExtenderConfig | None = None
    gpupool: GpupoolSpec | None = None
    ports: Ports = Ports()
    ready_timeout_s: float = 60.0
    # One real node (kubelet, containerd, runc) beside the kwok nodes (realnode/).
    real_node: RealNodeSpec | None = None


@dataclass(slots=True)
class ClusterState:
    """What `state.json` holds."""

    state_dir: str
    server: str = ""
    kubeconfig: str = ""
    bin_dir: str = ""
    ports: dict[str, int] = field(default_factory=dict)
    processes: list[ProcessRecord] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    extender_url: str | None = None
    # The real node's name and what the host looked like before it (`down` restores that).
    real_node: str | None = None
    host_before: HostBefore | None = None

    @property
    def web_url(self) -> str | None:
        """The web view's page, when gpupool runs with it."""
        port = self.ports.get("gpupool-web")
        return f"http://{LOOPBACK}:{port}/" if port else None

    def to_json(self) -> dict[str, Any]:
        return {
            "state_dir": self.state_dir,
            "server": self.server,
            "kubeconfig": self.kubeconfig,
            "bin_dir": self.bin_dir,
            "ports": self.ports,
            "processes": [p.to_json() for p in self.processes],
            "nodes": self.nodes,
            "extender_url": self.extender_url,
            "real_node": self.real_node,
            "host_before": self.host_before.to_json() if self.host_before else None,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClusterState:
        return cls(
            state_dir=str(data["state_dir"]),
            server=str(data.get("server", "")),
            kubeconfig=str(data.get("kubeconfig", "")),
            bin_dir=str(data.get("bin_dir", "")),
            ports={str(k): int(v) for k, v in dict(data.get("ports", {})).items()},
            processes=[ProcessRecord.from_json(p) for p in data.get("processes", [])],
            nodes=[str(n) for n in data.get("nodes", [])],
            extender_url=data.get("extender_url"),
            real_node=data.get("real_node"),
            host_before=HostBefore.from_json(data["host_before"])
            if data.get("host_before")
            else None,
        )


@dataclass(frozen=True, slots=True)
class ComponentStatus:
    name: str
    pid: int
    running: bool
    log: str
