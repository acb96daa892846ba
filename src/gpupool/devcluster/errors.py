"""Errors of the dev cluster: one class per kind, each message says what to do about it."""

from __future__ import annotations

from gpupool.adapters.kubernetes.errors import ApiServerError
from gpupool.domain.errors import GpupoolError


class DevClusterError(RuntimeError):
    """Base of every error the dev cluster raises."""


class PortTaken(DevClusterError):
    """A loopback port the cluster needs is already in use."""

    def __init__(self, component: str, port: int) -> None:
        super().__init__(
            f"{component}: port 127.0.0.1:{port} is already in use; stop whatever listens there "
            f"(`ss -ltnp 'sport = :{port}'` shows it) or let the dev cluster pick free ports"
        )
        self.component = component
        self.port = port


class BinaryMissing(DevClusterError):
    """A control-plane binary has not been built."""

    def __init__(self, binary: str, bin_dir: str, build_command: str) -> None:
        super().__init__(
            f"{binary} not found in {bin_dir}; build the control plane with: {build_command}"
        )
        self.binary = binary
        self.bin_dir = bin_dir
        self.build_command = build_command


class ComponentNotReady(DevClusterError):
    """A component exited or did not become ready in time; the message ends with its log."""

    def __init__(self, component: str, reason: str, log_path: str, log_tail: str) -> None:
        super().__init__(
            f"{component} did not become ready: {reason}\n"
            f"--- last lines of {log_path} ---\n{log_tail}"
        )
        self.component = component
        self.reason = reason
        self.log_path = log_path
        self.log_tail = log_tail


class ClusterAlreadyRunning(DevClusterError):
    """`up` was asked for a state folder whose cluster still runs."""


class ClusterNotRunning(DevClusterError):
    """A command needs a running cluster and there is none in the state folder."""


class InvalidClusterSpec(GpupoolError):
    """The node/GPU description given for the dev cluster cannot be used."""


class ApiError(DevClusterError, ApiServerError):
    """The apiserver answered a request with an error status (an ApiServerError, as every
    gpupool client's is; `status` is its `code`)."""

    def __init__(self, method: str, path: str, status: int, message: str) -> None:
        Exception.__init__(self, f"{method} {path}: HTTP {status}: {message}")
        self.method = method
        self.path = path
        self.status = self.code = status
        self.message = message


class RealNodeUnsupported(DevClusterError):
    """This host cannot run a real node (not root, no cgroups) or lacks a package for it."""


class RealNodeBusy(DevClusterError):
    """Another dev cluster's real node holds this machine's fixed kubelet folders."""


class UnknownComponent(DevClusterError):
    """`restart` was given a name that is not one of the cluster's components."""
