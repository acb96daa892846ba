"""A real Kubernetes control plane on loopback for development and end-to-end tests.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (fake nodes and pods),
built from their Go modules by `tools/k8s/build.sh`, run as plain processes on free 127.0.0.1
ports; `--real-node` adds a real kubelet on containerd (`realnode/`). `DevCluster` starts and
stops them; `gpupool dev-cluster` is the command line for it; `tests/e2e/conftest.py` brings one
up per test session.
"""

from gpupool.devcluster.cluster import DevCluster
from gpupool.devcluster.errors import (
    BinaryMissing,
    ClusterAlreadyRunning,
    ClusterNotRunning,
    ComponentNotReady,
    DevClusterError,
    InvalidClusterSpec,
    PortTaken,
)
from gpupool.devcluster.spec import ClusterSpec

__all__ = [
    "BinaryMissing",
    "ClusterAlreadyRunning",
    "ClusterNotRunning",
    "ClusterSpec",
    "ComponentNotReady",
    "DevCluster",
    "DevClusterError",
    "InvalidClusterSpec",
    "PortTaken",
]
