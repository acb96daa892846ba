"""What a container's limiter says it uses: its accounting file, read from the host.

The device plugin gives each GPU container a host folder of its own (`usage_dir(...)`, mounted
read-write) and points `GPUPOOL_SHARED_FILE` into it, so the file libgpupool keeps for the
container's processes (native/src/region.c) is one the agent can read too. The agent reads it at
each scrape without the limiter's lock: every field is one aligned store, and a scrape is a
sample, not an invoice.

Layout (version 2; native/src/region.c is the authority): a header whose first 32 bytes are the
same on every ABI — magic, version, size, procs_offset, hw, last_active_ns — then the limits,
the robust mutex (its size differs between ABIs, hence procs_offset), and 1024 process entries of
144 bytes: pid, pad, start time, bytes in use on each of the 16 rows. Row i is line i of the
limits file, which the device plugin writes in the lease's slice order.

Entries of processes that died without exiting (SIGKILL) still count until the limiter next
reaps them: at a process's start, when an allocation would not fit, or at a memory report. The
agent cannot judge pids of another pid namespace, so it shows what the file holds.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from gpupool.ports import ContainerUsage

MAGIC = 0x31306C6F6F707067  # "gppool01"
VERSION = 2
MAX_ROWS = 16
MAX_PROCS = 1024
FILE_NAME = "usage-v2"  # the file's name in a container's usage folder
_HEAD = struct.Struct("<QIIIIQ")  # magic, version, size, procs_offset, hw, last_active_ns
_PROC = struct.Struct(f"<iIQ{MAX_ROWS}Q")  # pid, pad, start_time, used[16]


class UsageFileError(ValueError):
    """The file is not a version-2 accounting file (another limiter version, or truncated)."""


def parse_usage(head: bytes, procs: bytes) -> ContainerUsage:
    """The usage from the header's first 32 bytes and the entries [0, hw) that follow."""
    if len(head) < _HEAD.size:
        raise UsageFileError(f"accounting header is {len(head)} bytes, expected {_HEAD.size}")
    magic, version, _size, _offset, hw, last_ns = _HEAD.unpack_from(head)
    if magic != MAGIC or version != VERSION:
        raise UsageFileError(
            f"not a libgpupool version-{VERSION} accounting file (magic {magic:#x}, "
            f"version {version})"
        )
    used = [0] * MAX_ROWS
    count = min(hw, MAX_PROCS, len(procs) // _PROC.size)
    for entry in _PROC.iter_unpack(procs[: count * _PROC.size]):
        if entry[0] != 0:
            for row in range(MAX_ROWS):
                used[row] += entry[3 + row]
    return ContainerUsage(tuple(used), last_ns / 1e9 if last_ns else None)


def read_usage(path: Path) -> ContainerUsage | None:
    """The container's usage now; None while the file does not exist (no CUDA call yet).

    Reads the header, then only the entries in use (hw of them), not the whole 144 KiB file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    try:
        head = os.pread(fd, _HEAD.size, 0)
        if len(head) < _HEAD.size:  # created, not yet sized and initialised by the limiter
            return None
        _magic, _version, size, offset, hw, _last = _HEAD.unpack(head)
        if offset <= 0 or size < offset or hw > MAX_PROCS:
            raise UsageFileError(f"{path}: accounting header is inconsistent")
        procs = os.pread(fd, min(hw, MAX_PROCS) * _PROC.size, offset)
    finally:
        os.close(fd)
    if head[:8] == bytes(8):  # sized by the limiter, header not written yet
        return None
    return parse_usage(head, procs)


def usage_file(usage_dir: Path, key: str) -> Path:
    """The accounting file of the container whose allocation key is `key`
    (device_plugin.decide.allocation_key)."""
    return usage_dir / key / FILE_NAME
