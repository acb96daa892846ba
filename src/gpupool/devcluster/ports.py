"""Loopback ports: pick free ones, or check that a chosen one is free.

A port picked here is bound later, by another process, seconds after the pick (etcd, the API
server, gpupool's own servers start one after another). Two things can take it in that gap: an
outgoing connection, which gets its local port from the kernel's ephemeral range, and another
process picking at the same time (pytest-xdist workers bring up clusters side by side). A CI run
here lost the extender's port in that gap (which of the two took it was not recorded). So ports
are drawn at random from outside the ephemeral range, and each pick is reserved for a while by a
file only one process can create.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import tempfile
import time
from pathlib import Path

from gpupool.devcluster.errors import PortTaken

LOOPBACK = "127.0.0.1"
LOWEST = 10000  # below: well-known and registered services' ports
RESERVED_S = 120.0  # a pick stays unpickable this long: ample time for its owner to bind it
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
RESERVATIONS = Path(tempfile.gettempdir()) / "gpupool-ports"


def ephemeral_range(path: Path = EPHEMERAL_RANGE) -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports (Linux's default if unreadable)."""
    try:
        low, high = (int(part) for part in path.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def pickable(ephemeral: tuple[int, int]) -> list[range]:
    """The port ranges outside `ephemeral`, from LOWEST up."""
    low, high = ephemeral
    spans = [range(LOWEST, min(low, 65536)), range(max(high + 1, LOWEST), 65536)]
    return [span for span in spans if len(span) > 0]


def reserve(port: int, root: Path = RESERVATIONS, now: float | None = None) -> bool:
    """Whether this process now holds `port`'s reservation: the file `root/port` is created
    anew, or replaced when older than RESERVED_S (its owner has bound the port or given up).
    Where `root` cannot be made (a read-only temp folder), every port counts as reserved: the
    pick then rests on the free check and the range alone, as it did before reservations."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:
        return True
    marker = root / str(port)
    for _ in range(2):
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            return True
        except FileExistsError:
            try:
                age = (time.time() if now is None else now) - marker.stat().st_mtime
            except FileNotFoundError:
                continue
            if age < RESERVED_S:
                return False
            with contextlib.suppress(FileNotFoundError):
                marker.unlink()
    return False


def free_port() -> int:
    """A port nothing listens on now, outside the ephemeral range, reserved for this process.

    Falls back to the kernel's pick where no range is left outside the ephemeral one.
    """
    spans = pickable(ephemeral_range())
    if spans:
        draw = random.SystemRandom()
        for _ in range(200):
            span = draw.choices(spans, weights=[len(s) for s in spans])[0]
            port = draw.choice(span)
            if is_free(port) and reserve(port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        picked: int = sock.getsockname()[1]
        return picked


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
