"""Where the control-plane binaries live and which versions they are.

`tools/k8s/build.sh` builds them into the same folder from the wrapper Go modules in
`tools/k8s/*/go.mod`; the versions below must match those files (a unit test checks it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gpupool.devcluster.errors import BinaryMissing

KUBERNETES_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"

BIN_DIR_ENV = "GPUPOOL_K8S_BIN"
BUILD_COMMAND = "make k8s  (or: tools/k8s/build.sh)"

COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "kubectl",
)
# Only `up --real-node` runs it, so a cluster without one does not need it built.
KUBELET = "kubelet"


def version_tag() -> str:
    """The name of the versioned cache folder, as build.sh writes it."""
    return f"kubernetes-{KUBERNETES_VERSION}_etcd-{ETCD_VERSION}_kwok-{KWOK_VERSION}"


def default_bin_dir() -> Path:
    """$GPUPOOL_K8S_BIN, else ~/.cache/gpupool/k8s/<versions>/bin (honours XDG_CACHE_HOME)."""
    override = os.environ.get(BIN_DIR_ENV)
    if override:
        return Path(override)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "gpupool" / "k8s" / version_tag() / "bin"


@dataclass(frozen=True, slots=True)
class Binaries:
    """Absolute paths of the executables the dev cluster runs (the kubelet: `kubelet()`)."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kwok: Path
    kubectl: Path

    @classmethod
    def locate(cls, bin_dir: Path | None = None) -> Binaries:
        """Find every binary in `bin_dir` (default: `default_bin_dir()`) or raise BinaryMissing."""
        folder = (bin_dir or default_bin_dir()).expanduser().resolve()
        return cls(**{name.replace("-", "_"): _find(folder, name) for name in COMPONENTS})

    def kubelet(self) -> Path:
        """The kubelet beside the other binaries, or BinaryMissing."""
        return _find(self.kubectl.parent, KUBELET)


def _find(folder: Path, name: str) -> Path:
    path = folder / name
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise BinaryMissing(name, str(folder), BUILD_COMMAND)
    return path
