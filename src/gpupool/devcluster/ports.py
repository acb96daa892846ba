"""Loopback ports: pick free ones, or check that a chosen one is free."""

from __future__ import annotations

import contextlib
import socket

from gpupool.devcluster.errors import PortTaken

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A port nothing listens on right now (the kernel's pick of an ephemeral port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
        return True


def is_listening(port: int) -> bool:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((LOOPBACK, port)) == 0


def claim(component: str, port: int | None, taken: set[int]) -> int:
    """`port` if it is free (PortTaken otherwise), or a free port when `port` is None.

    `taken` holds the ports already handed out for this cluster, so two components never get
    the same one; the returned port is added to it.
    """
    if port is not None:
        if port in taken or not is_free(port):
            raise PortTaken(component, port)
        taken.add(port)
        return port
    while True:
        candidate = free_port()
        if candidate not in taken:
            taken.add(candidate)
            return candidate
