"""Loopback port picks: outside the kernel's ephemeral range, reserved across processes."""

from __future__ import annotations

import socket
from pathlib import Path

from gpupool.devcluster import ports


def test_the_ephemeral_range_is_read_from_the_kernels_file(tmp_path: Path) -> None:
    path = tmp_path / "ip_local_port_range"
    path.write_text("40000\t50000\n")
    assert ports.ephemeral_range(path) == (40000, 50000)
    assert ports.ephemeral_range(tmp_path / "missing") == (32768, 60999)
    path.write_text("garbage\n")
    assert ports.ephemeral_range(path) == (32768, 60999)


def test_pickable_ranges_leave_out_the_ephemeral_range_and_low_ports() -> None:
    assert ports.pickable((32768, 60999)) == [range(10000, 32768), range(61000, 65536)]
    assert ports.pickable((1024, 65535)) == []
    assert ports.pickable((5000, 20000)) == [range(20001, 65536)]


def test_a_reservation_is_held_until_it_is_stale(tmp_path: Path) -> None:
    assert ports.reserve(20001, tmp_path)
    assert not ports.reserve(20001, tmp_path)  # another process's pick, moments later
    stamp = (tmp_path / "20001").stat().st_mtime
    assert not ports.reserve(20001, tmp_path, now=stamp + ports.RESERVED_S - 1)
    assert ports.reserve(20001, tmp_path, now=stamp + ports.RESERVED_S + 1)
    assert ports.reserve(20002, tmp_path)


def test_no_reservation_folder_leaves_the_pick_to_the_free_check(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    assert ports.reserve(20003, blocker / "ports")
    assert ports.reserve(20003, blocker / "ports")


def test_free_port_is_outside_the_ephemeral_range_free_and_reserved() -> None:
    low, high = ports.ephemeral_range()
    picked = {ports.free_port() for _ in range(20)}
    assert len(picked) == 20
    for port in picked:
        assert not low <= port <= high and port >= ports.LOWEST
        assert ports.is_free(port)
        assert not ports.reserve(port)  # a second pick cannot hand it out again


def test_a_bound_port_is_not_free() -> None:
    with socket.socket() as sock:
        sock.bind((ports.LOOPBACK, 0))
        assert not ports.is_free(sock.getsockname()[1])
