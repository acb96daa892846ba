"""How long a Unix socket's path may be, checked before a server binds one: Linux keeps it in
sun_path, 108 bytes with its terminating NUL, and a longer path fails deep in gRPC or containerd
with a message that names neither the limit nor the folder to shorten."""

from __future__ import annotations

from gpupool.domain.errors import GpupoolError

SUN_PATH_MAX = 107  # bytes of path, without the NUL


class SocketPathTooLong(GpupoolError):
    """A Unix socket would be made at a path longer than the kernel allows."""


def check_socket_path(path: str, what: str, fix: str, limit: int = SUN_PATH_MAX) -> None:
    """Raise SocketPathTooLong when `path` is over `limit` bytes; `what` names the socket,
    `fix` says which folder to choose shorter."""
    size = len(path.encode())
    if size > limit:
        raise SocketPathTooLong(
            f"{what} would be at {path} ({size} bytes), but a Unix socket's path may be at most "
            f"{limit} bytes: {fix}"
        )
