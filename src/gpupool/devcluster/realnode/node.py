"""Start the real node: its address link, containerd, the images, the kubelet and gpupool's
agent. `DevCluster.up` calls `prepare` before anything starts (so a host that cannot run a node
fails at once) and `start` once the control plane is ready; every process goes through the
cluster's `launch`, so `state.json` knows it and `down` stops it (`teardown.py`)."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import sys
import urllib.error
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpupool.adapters.tls import Authority, name, write_cert, write_key
from gpupool.adapters.wire.names import (
    API_VERSION,
    DRA_DRIVER,
    LABEL_GPU_COUNT,
    LABEL_GPU_MEMORY,
    LABEL_GPU_MODEL,
)
from gpupool.devcluster import rbac
from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.certs import KUBELET_CLIENT_USER, issue_client
from gpupool.devcluster.errors import ApiError, RealNodeBusy, RealNodeUnsupported
from gpupool.devcluster.kubeconfig import write_kubeconfig
from gpupool.devcluster.nodes import VGPU_RESOURCE, GpuSpec, ready_for_pods
from gpupool.devcluster.ports import free_port
from gpupool.devcluster.processes import ProcessRecord
from gpupool.devcluster.realnode import configs, host
from gpupool.devcluster.realnode.layout import (
    CGROUP_ROOT,
    CONTAINERD_NAMESPACE,
    DEVICE_PLUGIN_DIR,
    FIXED_HOST_DIRS,
    IMAGE_DIR_ENV,
    NODE_IP,
    NODE_LINK,
    NODE_NAME,
    OWNER_FILE,
    TOUCHED_SYSCTLS,
    Layout,
)
from gpupool.domain.sockets import check_socket_path
from gpupool.node.dra.slices import slice_name

NODE_USER_GROUP = "system:nodes"
REPO_ROOT = Path(__file__).resolve().parents[4]
NATIVE_BUILD = REPO_ROOT / "native" / "build"
IMAGE_ARCHIVES = ("pause.tar", "gpu-probe.tar")
KUBELET_API_RBAC: tuple[dict[str, Any], ...] = (
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "gpupool-dev-apiserver-kubelet-client"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "system:kubelet-api-admin",
        },
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": KUBELET_CLIENT_USER}
        ],
    },
)

# With the DRA driver (RealNodeSpec.dra): what the chart's `dra.enabled` grants the agent
# (templates/rbac/agent.yaml), bound to the agent's ServiceAccount; the DeviceClass is
# deploy/dra/deviceclass.yaml.
DRA_AGENT_ROLE = "gpupool-dev-agent-dra"
DRA_AGENT_RBAC: tuple[dict[str, Any], ...] = (
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": DRA_AGENT_ROLE},
        "rules": [
            {
                "apiGroups": ["resource.k8s.io"],
                "resources": ["resourceslices"],
                "verbs": ["get", "create", "update", "delete"],
            },
            {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]},
        ],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": DRA_AGENT_ROLE},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": DRA_AGENT_ROLE,
        },
        "subjects": [
            {
                "kind": "ServiceAccount",
                "name": rbac.COMPONENT_ACCOUNTS["gpupool-heartbeat"],
                "namespace": rbac.NAMESPACE,
            }
        ],
    },
)
DEVICE_CLASS_FILE = REPO_ROOT / "deploy" / "dra" / "deviceclass.yaml"
RESOURCE_API = "/apis/resource.k8s.io/v1"

Launch = Callable[[str, list[str]], ProcessRecord]
Wait = Callable[[ProcessRecord, Callable[[], bool]], None]


@dataclass(frozen=True, slots=True)
class RealNodeSpec:
    """The real node's fake GPUs (served by gpupool's agent when gpupool runs); `dra`: the
    agent also runs the DRA driver gpu.gpupool.io (`--dra`), registered with this kubelet and
    writing its CDI specs where containerd reads them."""

    gpus: GpuSpec
    name: str = NODE_NAME
    dra: bool = False


@dataclass(slots=True)
class HostBefore:
    """What the host looked like before the node started: `down` puts it back."""

    sysctls: dict[str, str] = field(default_factory=dict)
    iptables_chains: dict[str, list[str]] = field(default_factory=dict)
    # each fixed folder's entries before (None: the folder did not exist)
    fixed_dirs: dict[str, list[str] | None] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "sysctls": self.sysctls,
            "iptables_chains": self.iptables_chains,
            "fixed_dirs": self.fixed_dirs,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HostBefore:
        return cls(
            sysctls={str(k): str(v) for k, v in dict(data.get("sysctls", {})).items()},
            iptables_chains={
                str(k): [str(c) for c in v]
                for k, v in dict(data.get("iptables_chains", {})).items()
            },
            fixed_dirs={
                str(k): None if v is None else [str(e) for e in v]
                for k, v in dict(data.get("fixed_dirs", {})).items()
            },
        )


def image_dir() -> Path:
    override = os.environ.get(IMAGE_DIR_ENV)
    if override:
        return Path(override)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "gpupool" / "real-node" / "images"


def prepare(
    state_dir: Path, running: Callable[[Path], bool], clean: Callable[[Path], object]
) -> host.HostTools:
    """Check the host before the cluster starts: tools, images, and that no other dev cluster's
    real node holds this machine's fixed kubelet folders (`running` tells whether the cluster
    of a state folder still runs). The leftovers of one that is gone without `down` (its
    processes were killed) are cleaned first with `clean` (that cluster's `down`)."""
    tools = host.host_tools()
    missing = [a for a in IMAGE_ARCHIVES if not (image_dir() / a).is_file()]
    if missing:
        raise RealNodeUnsupported(
            f"the real node's images are not built ({', '.join(missing)} missing in "
            f"{image_dir()}); build them with: {host.SETUP_COMMAND}"
        )
    if (
        not (NATIVE_BUILD / "libgpupool.so").is_file()
        or not (NATIVE_BUILD / "fake" / "libcuda.so.1").is_file()
    ):
        raise RealNodeUnsupported(
            f"the limiter and the fake driver are not built in {NATIVE_BUILD}; run: make native"
        )
    try:
        owner = Path(OWNER_FILE.read_text().strip())
    except OSError:
        owner = None
    if owner is not None and owner != state_dir and running(owner):
        raise RealNodeBusy(
            f"the dev cluster in {owner} runs this machine's real node (a kubelet always uses "
            f"{DEVICE_PLUGIN_DIR}, so there is one per machine); stop it with "
            f"`gpupool dev-cluster down --dir {owner}` first"
        )
    if owner is not None:
        clean(owner)
    return tools


def record_host() -> HostBefore:
    fixed: dict[str, list[str] | None] = {}
    for folder in FIXED_HOST_DIRS:
        fixed[str(folder)] = sorted(os.listdir(folder)) if folder.is_dir() else None
    return HostBefore(
        sysctls=host.read_sysctls(TOUCHED_SYSCTLS),
        iptables_chains=host.iptables_chains(),
        fixed_dirs=fixed,
    )


class RealNode:
    """Starts one real node for the cluster in `state_dir`."""

    def __init__(
        self,
        state_dir: Path,
        pki_dir: Path,
        server: str,
        tools: host.HostTools,
        kubelet: Path,
        spec: RealNodeSpec,
    ) -> None:
        self.layout = Layout.under(state_dir)
        self.state_dir = state_dir
        self.pki_dir = pki_dir
        self.server = server
        self.tools = tools
        self.kubelet = kubelet
        self.spec = spec

    def start(self, api: KubeApi, launch: Launch, wait: Wait, *, with_agent: bool) -> None:
        layout = self.layout
        # containerd also listens on <socket>.ttrpc, and refuses a path over 104 bytes
        check_socket_path(
            f"{layout.containerd_socket}.ttrpc",
            "the real node's containerd socket",
            "put the dev cluster's state folder on a shorter path (--dir or "
            "GPUPOOL_DEV_CLUSTER_DIR; tests: a shorter TMPDIR or --basetemp)",
            limit=104,
        )
        shutil.rmtree(layout.root, ignore_errors=True)
        folders = (layout.root, layout.cni_conf_dir, layout.cdi_spec_dir, layout.limits_dir,
                   layout.usage_dir, layout.pod_logs)  # fmt: skip
        for folder in folders:
            folder.mkdir(parents=True, exist_ok=True)
        DEVICE_PLUGIN_DIR.mkdir(parents=True, exist_ok=True)
        OWNER_FILE.write_text(f"{self.state_dir}\n")
        host.add_address_link(NODE_LINK, NODE_IP)
        host.make_cgroup(CGROUP_ROOT)

        self._write_runtime_files()
        containerd = launch("containerd", configs.containerd_argv(self.tools.containerd, layout))
        wait(containerd, self._containerd_ready)
        self._import_images()

        for obj in KUBELET_API_RBAC:
            api.create_or_replace(obj)
        self._write_kubelet_files()
        argv = configs.kubelet_argv(
            self.kubelet, layout, node=self.spec.name, labels=self._labels()
        )
        kubelet = launch("kubelet", argv)
        wait(kubelet, lambda: self._node_ready(api))
        if with_agent:
            if self.spec.dra:
                self._dra_objects(api)
            agent = launch("gpupool-agent", self._agent_argv())
            wait(agent, lambda: self._gpus_advertised(api))
            if self.spec.dra:
                wait(agent, lambda: self._slice_published(api))

    # ---- files ----------------------------------------------------------------------------

    def _write_runtime_files(self) -> None:
        layout = self.layout
        layout.containerd_config.parent.mkdir(parents=True, exist_ok=True)
        layout.containerd_config.write_text(
            configs.containerd_config(layout, self.tools.cni_bin_dir, self.tools.shim)
        )
        (layout.cni_conf_dir / "10-gpupool-dev.conflist").write_text(configs.cni_conflist(layout))
        toolkit = Path(__file__).with_name("fake_toolkit.py")
        layout.runtime_wrapper.write_text(
            "#!/bin/sh\n"
            f"exec {sys.executable} -I {toolkit} --runc {self.tools.runc} "
            f'--driver-dir {NATIVE_BUILD / "fake"} -- "$@"\n'
        )
        layout.runtime_wrapper.chmod(0o755)

    def _write_kubelet_files(self) -> None:
        layout = self.layout
        user = f"system:node:{self.spec.name}"
        client = issue_client(self.pki_dir, "kubelet", user, (NODE_USER_GROUP,))
        write_kubeconfig(
            layout.kubelet_kubeconfig,
            self.server,
            self.pki_dir / "ca.crt",
            client.cert,
            client.key,
            user,
        )
        now = dt.datetime.now(dt.UTC)
        ca = Authority.load(self.pki_dir / "ca.crt", self.pki_dir / "ca.key", now)
        cert, key = ca.issue(
            name(user, NODE_USER_GROUP), server=True, dns_names=(self.spec.name,), ips=(NODE_IP,)
        )

        serving = configs.KubeletTls(
            self.pki_dir / "ca.crt",
            layout.root / "kubelet-serving.crt",
            layout.root / "kubelet-serving.key",
        )
        write_cert(serving.cert, cert)
        write_key(serving.key, key)
        config = configs.kubelet_configuration(
            layout, serving, port=free_port(), healthz_port=free_port()
        )
        layout.kubelet_config.write_text(configs.render_kubelet_configuration(config))

    def _labels(self) -> dict[str, str]:
        labels = {"type": "real", LABEL_GPU_COUNT: str(self.spec.gpus.count)}
        model = self.spec.gpus.model
        if model is not None and self.spec.gpus.count:
            labels[LABEL_GPU_MODEL] = model.name
            if model.memory_bytes is not None:
                labels[LABEL_GPU_MEMORY] = str(model.memory_bytes)
        return labels

    def _agent_argv(self) -> list[str]:
        layout = self.layout
        account = rbac.COMPONENT_ACCOUNTS["gpupool-heartbeat"]  # the agent's ServiceAccount
        user = rbac.service_account_user(account)
        pair = issue_client(self.pki_dir, "gpupool-agent", user, rbac.service_account_groups())
        write_kubeconfig(
            layout.agent_kubeconfig, self.server, self.pki_dir / "ca.crt", pair.cert, pair.key, user
        )
        return [
            sys.executable, "-m", "gpupool.cli.main", "dev-cluster", "agent",
            "--node-name", self.spec.name,
            "--fake-gpus", str(self.spec.gpus),
            "--kubeconfig", str(layout.agent_kubeconfig),
            "--device-plugin-dir", str(DEVICE_PLUGIN_DIR),
            "--limiter-path", str(NATIVE_BUILD / "libgpupool.so"),
            "--limits-dir", str(layout.limits_dir),
            "--usage-dir", str(layout.usage_dir),
            "--heartbeat", "5",
            *self._dra_argv(),
        ]  # fmt: skip

    def _dra_argv(self) -> list[str]:
        """The DRA driver's flags: the kubelet's plugin folders are under its --root-dir, and
        the CDI specs go where containerd looks (its only cdi_spec_dirs)."""
        if not self.spec.dra:
            return []
        layout = self.layout
        return [
            "--dra",
            "--dra-state-dir", str(layout.dra_state_dir),
            "--kubelet-plugins-dir", str(layout.kubelet_plugins_dir),
            "--kubelet-registry-dir", str(layout.kubelet_registry_dir),
            "--cdi-dir", str(layout.cdi_spec_dir),
        ]  # fmt: skip

    def _dra_objects(self, api: KubeApi) -> None:
        """The DeviceClass and the agent's DRA rights, before the agent publishes."""
        for obj in DRA_AGENT_RBAC:
            api.create_or_replace(obj)
        if api.find(f"{RESOURCE_API}/deviceclasses/{DRA_DRIVER}") is None:
            device_class = yaml.safe_load(DEVICE_CLASS_FILE.read_text())
            api.create(f"{RESOURCE_API}/deviceclasses", device_class)

    # ---- containerd ---------------------------------------------------------------------------

    def ctr(self, *args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
        argv = [
            str(self.tools.ctr), "--address", str(self.layout.containerd_socket),
            "--namespace", CONTAINERD_NAMESPACE, *args,
        ]  # fmt: skip
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)

    def _containerd_ready(self) -> bool:
        if not self.layout.containerd_socket.exists():
            return False
        return self.ctr("version", timeout_s=5).returncode == 0

    def _import_images(self) -> None:
        for archive in IMAGE_ARCHIVES:
            done = self.ctr("images", "import", str(image_dir() / archive))
            if done.returncode != 0:
                raise RealNodeUnsupported(
                    f"containerd could not import {image_dir() / archive}: {done.stderr.strip()}"
                )

    # ---- readiness ----------------------------------------------------------------------------

    def _node_ready(self, api: KubeApi) -> bool:
        try:
            node = api.find(f"/api/v1/nodes/{self.spec.name}")
        except (ApiError, urllib.error.URLError, OSError):
            return False
        return node is not None and ready_for_pods(node)

    def _gpus_advertised(self, api: KubeApi) -> bool:
        """The kubelet shows the agent's gpupool.io/vgpu and the agent published its GpuNode."""
        try:
            node = api.find(f"/api/v1/nodes/{self.spec.name}")
            gpunode = api.find(f"/apis/{API_VERSION}/gpunodes/{self.spec.name}")
        except (ApiError, urllib.error.URLError, OSError):
            return False
        if node is None or gpunode is None:
            return False
        vgpus = ((node.get("status") or {}).get("allocatable") or {}).get(VGPU_RESOURCE, "0")
        return int(vgpus) > 0 and "devices" in (gpunode.get("status") or {})

    def _slice_published(self, api: KubeApi) -> bool:
        """The agent's DRA driver published the node's ResourceSlice."""
        try:
            found = api.find(f"{RESOURCE_API}/resourceslices/{slice_name(self.spec.name)}")
        except (ApiError, urllib.error.URLError, OSError):
            return False
        return found is not None
