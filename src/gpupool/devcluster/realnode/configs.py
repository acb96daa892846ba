"""The real node's configuration files, rendered from its layout: no I/O here."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpupool.devcluster.realnode.layout import (
    CGROUP_ROOT,
    CNI_BRIDGE,
    NODE_IP,
    PAUSE_IMAGE,
    POD_SUBNET,
    Layout,
)

CNI_NETWORK = "gpupool-dev"
_RUNTIME = "plugins.'io.containerd.cri.v1.runtime'"
_IMAGES = "plugins.'io.containerd.cri.v1.images'"


def containerd_config(layout: Layout, cni_bin_dir: Path, shim: Path) -> str:
    """containerd v2 (config version 3): private root, state, socket and CDI spec folder; the
    CRI plugin with the local pause image, runc through the toolkit stand-in (by the shim
    `shim`, the one built with this containerd) and CNI from `cni_bin_dir`."""
    runc = f"{_RUNTIME}.containerd.runtimes.runc"
    return "\n".join(
        [
            "version = 3",
            f'root = "{layout.containerd_root}"',
            f'state = "{layout.containerd_state}"',
            # Snapshotters this host cannot use would only log errors at start; NRI would serve
            # a socket in the host's /var/run/nri, which the dev cluster does not own.
            'disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", '
            '"io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", '
            '"io.containerd.snapshotter.v1.erofs", "io.containerd.snapshotter.v1.blockfile", '
            '"io.containerd.nri.v1.nri"]',
            "[grpc]",
            f'  address = "{layout.containerd_socket}"',
            "[ttrpc]",
            f'  address = "{layout.containerd_socket}.ttrpc"',
            "[metrics]",
            '  address = ""',
            f"[{_IMAGES}]",
            '  snapshotter = "overlayfs"',
            f"[{_IMAGES}.pinned_images]",
            f'  sandbox = "{PAUSE_IMAGE}"',
            f"[{_RUNTIME}]",
            # Root here lacks CAP_SYS_RESOURCE: lowering a container's oom_score_adj is denied,
            # and runc then fails every sandbox ("can't get final child's PID from pipe").
            "  restrict_oom_score_adj = true",
            "  netns_mounts_under_state_dir = true",
            "  enable_selinux = false",
            # CDI (always on in containerd v2): the devices a CRI request names as CDI devices
            # (a device plugin's or a DRA driver's) are injected from the specs in this folder.
            f'  cdi_spec_dirs = ["{layout.cdi_spec_dir}"]',
            f"[{_RUNTIME}.containerd]",
            '  default_runtime_name = "runc"',
            f"[{runc}]",
            '  runtime_type = "io.containerd.runc.v2"',
            # By path: a containerd-shim-runc-v2 on PATH (Debian's containerd 1.6) is not ours.
            f'  runtime_path = "{shim}"',
            f"[{runc}.options]",
            f'  BinaryName = "{layout.runtime_wrapper}"',
            "  SystemdCgroup = false",
            f"[{_RUNTIME}.cni]",
            f'  bin_dirs = ["{cni_bin_dir}"]',
            f'  conf_dir = "{layout.cni_conf_dir}"',
            "  max_conf_num = 1",
            "",
        ]
    )


def cni_conflist(layout: Layout) -> str:
    """A bridge network with host-local addresses. No gateway and no masquerading: pods need
    no route off the node, and so CNI changes no sysctl and adds no iptables rule."""
    config = {
        "cniVersion": "0.4.0",
        "name": CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": CNI_BRIDGE,
                "isGateway": False,
                "ipMasq": False,
                "hairpinMode": False,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_SUBNET}]],
                    "dataDir": str(layout.cni_ipam_dir),
                },
            }
        ],
    }
    return json.dumps(config, indent=2) + "\n"


@dataclass(frozen=True, slots=True)
class KubeletTls:
    ca: Path
    cert: Path
    key: Path


def kubelet_configuration(
    layout: Layout, tls: KubeletTls, *, port: int, healthz_port: int
) -> dict[str, Any]:
    """KubeletConfiguration: cgroupfs on this host's cgroup v1, serving TLS from the cluster's
    CA, client-certificate authentication and webhook authorization (never anonymous)."""
    socket = f"unix://{layout.containerd_socket}"
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": NODE_IP,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "tlsCertFile": str(tls.cert),
        "tlsPrivateKeyFile": str(tls.key),
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(tls.ca)},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": socket,
        "imageServiceEndpoint": socket,
        "cgroupDriver": "cgroupfs",
        # Every pod cgroup under one root of our own: `down` removes that subtree.
        "cgroupRoot": CGROUP_ROOT,
        "failCgroupV1": False,
        "failSwapOn": False,
        "podCIDR": POD_SUBNET,
        "podLogsDir": str(layout.pod_logs),
        "clusterDomain": "cluster.local",
        "resolvConf": "/etc/resolv.conf",
        # A small shared disk: eviction only when truly full, no image garbage collection.
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "nodeStatusUpdateFrequency": "5s",
        "registerNode": True,
    }


def render_kubelet_configuration(config: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(config), sort_keys=False)


def kubelet_argv(
    kubelet: Path, layout: Layout, *, node: str, labels: Mapping[str, str]
) -> list[str]:
    return [
        str(kubelet),
        f"--config={layout.kubelet_config}",
        f"--kubeconfig={layout.kubelet_kubeconfig}",
        f"--root-dir={layout.kubelet_root}",
        f"--hostname-override={node}",
        f"--node-ip={NODE_IP}",
        "--node-labels=" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())),
        "--v=1",
    ]


def containerd_argv(containerd: Path, layout: Layout) -> list[str]:
    return [str(containerd), f"--config={layout.containerd_config}"]
