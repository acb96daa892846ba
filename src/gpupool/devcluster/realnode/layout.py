"""Paths and host names of the real node: one place, so that `up` and `down` agree."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

NODE_NAME = "real-node-0"
# The kubelet refuses a loopback or link-local node IP, and this kernel has no `dummy` links: the
# address sits on a bridge without ports, from the benchmarking range (RFC 2544), which no
# network routes.
NODE_LINK = "gpupool-node0"
NODE_IP = "198.18.213.1"
CNI_BRIDGE = "gpupool-cni0"
POD_SUBNET = "10.88.213.0/24"
CGROUP_ROOT = "/gpupool-real-node"
CONTAINERD_NAMESPACE = "k8s.io"  # the CRI plugin's namespace
PAUSE_IMAGE = "gpupool.dev/pause:local"
PROBE_IMAGE = "gpupool.dev/gpu-probe:local"

# A kubelet uses these whatever its --root-dir: the device-plugin folder (where the agent
# registers) and the container log symlinks. Hence one real node per machine.
KUBELET_SYSTEM_DIR = Path("/var/lib/kubelet")
DEVICE_PLUGIN_DIR = KUBELET_SYSTEM_DIR / "device-plugins"
CONTAINER_LOG_DIR = Path("/var/log/containers")
FIXED_HOST_DIRS = (KUBELET_SYSTEM_DIR, CONTAINER_LOG_DIR, Path("/var/log/pods"))
# Who owns the fixed folders now: a second `up --real-node` on this machine is refused.
OWNER_FILE = KUBELET_SYSTEM_DIR / "gpupool-dev-cluster-owner"

# What the kubelet tunes on the host (its setupKernelTunables) and what CNI may: `down` puts
# back what changed.
TOUCHED_SYSCTLS = (
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "net.ipv4.ip_forward",
)

# Where tools/realnode/build-images.sh leaves the image archives.
IMAGE_DIR_ENV = "GPUPOOL_REALNODE_IMAGES"


@dataclass(frozen=True, slots=True)
class Layout:
    """Everything of the real node under the dev cluster's state folder."""

    root: Path

    @classmethod
    def under(cls, state_dir: Path) -> Layout:
        return cls(state_dir / "real-node")

    @property
    def containerd_root(self) -> Path:
        return self.root / "containerd" / "root"

    @property
    def containerd_state(self) -> Path:
        return self.root / "containerd" / "state"

    @property
    def containerd_socket(self) -> Path:
        return self.root / "containerd" / "containerd.sock"

    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd" / "config.toml"

    @property
    def cdi_spec_dir(self) -> Path:
        """containerd's only CDI spec folder (not the host's /etc/cdi or /var/run/cdi)."""
        return self.root / "cdi"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_ipam_dir(self) -> Path:
        return self.root / "cni" / "ipam"

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.root / "kubelet.yaml"

    @property
    def kubelet_kubeconfig(self) -> Path:
        return self.root / "kubelet.kubeconfig"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pod-logs"

    @property
    def runtime_wrapper(self) -> Path:
        return self.root / "nvidia-runc"

    @property
    def limits_dir(self) -> Path:
        return self.root / "gpupool-limits"

    @property
    def usage_dir(self) -> Path:
        """The containers' limiter accounting folders (the agent's --usage-dir)."""
        return self.root / "gpupool-usage"

    @property
    def agent_kubeconfig(self) -> Path:
        return self.root / "agent.kubeconfig"

    @property
    def kubelet_plugins_dir(self) -> Path:
        """Where DRA drivers put their service sockets (the agent's --kubelet-plugins-dir)."""
        return self.kubelet_root / "plugins"

    @property
    def kubelet_registry_dir(self) -> Path:
        """The kubelet's plugin watcher folder: under its --root-dir, unlike the device-plugin
        folder, so it is the node's own (the agent's --kubelet-registry-dir)."""
        return self.kubelet_root / "plugins_registry"

    @property
    def dra_state_dir(self) -> Path:
        """The DRA plugin's checkpoints of prepared claims (the agent's --dra-state-dir)."""
        return self.root / "gpupool-dra"
