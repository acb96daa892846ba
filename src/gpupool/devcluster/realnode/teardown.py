"""Undo a real node: every step is safe to repeat and to run after a half-finished `up`.

Order matters: the containers' processes die first (so nothing holds a mount or a network
namespace), then containerd's leftovers (shims, mounts), then the host objects the node made
(links, iptables chains, cgroups, sysctls, the kubelet's fixed folders).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from gpupool.devcluster.processes import ProcessRecord
from gpupool.devcluster.realnode import host
from gpupool.devcluster.realnode.layout import (
    CGROUP_ROOT,
    CNI_BRIDGE,
    NODE_LINK,
    OWNER_FILE,
    Layout,
)
from gpupool.devcluster.realnode.node import HostBefore

# Stop order: the agent, then the kubelet (no new containers), containerd last.
NODE_PROCESSES = ("gpupool-agent", "kubelet", "containerd")


@dataclass(slots=True)
class TeardownReport:
    """What `down` found and removed (for its message and for tests)."""

    killed: list[int] = field(default_factory=list)
    unmounted: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    chains: list[str] = field(default_factory=list)
    cgroups: list[str] = field(default_factory=list)
    sysctls: list[str] = field(default_factory=list)


def teardown(
    state_dir: Path,
    before: HostBefore,
    records: Iterable[ProcessRecord],
    stop: Callable[[ProcessRecord], None],
) -> TeardownReport:
    layout = Layout.under(state_dir)
    report = TeardownReport()
    by_name = {r.name: r for r in records}
    for name in NODE_PROCESSES[:2]:
        if name in by_name:
            stop(by_name[name])
    report.killed += kill_cgroup_tree(CGROUP_ROOT)
    if "containerd" in by_name:
        stop(by_name["containerd"])
    report.killed += kill_shims(layout.containerd_socket)
    wait_dead(report.killed)
    report.unmounted = unmount_under([layout.root, *(Path(d) for d in before.fixed_dirs)])
    report.links = delete_links()
    report.chains = host.remove_new_chains(before.iptables_chains)
    report.cgroups = remove_cgroup_tree(CGROUP_ROOT)
    report.sysctls = host.restore_sysctls(before.sysctls)
    restore_fixed_dirs(before.fixed_dirs)
    with contextlib.suppress(OSError):
        OWNER_FILE.unlink()
    return report


# ---- processes ----------------------------------------------------------------------------


def kill_cgroup_tree(relative: str) -> list[int]:
    """SIGKILL every process in the cgroup subtree (containers, pause), in every hierarchy."""
    pids: set[int] = set()
    for top in host.cgroup_dirs(relative):
        for procs in top.rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(p) for p in procs.read_text().split())
    for pid in sorted(pids):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return sorted(pids)


def wait_dead(pids: Iterable[int], timeout_s: float = 10.0) -> list[int]:
    """Until every SIGKILLed process is dead (SIGKILL lands asynchronously; one in the middle
    of a kernel call dies when it returns); the ones still alive at the deadline."""
    deadline = time.monotonic() + timeout_s
    alive = [pid for pid in pids if not host.is_dead(pid)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [pid for pid in alive if not host.is_dead(pid)]
    return alive


def kill_shims(socket: Path) -> list[int]:
    """SIGKILL containerd's shims for this containerd (they outlive it, each its own session)."""
    killed = []
    marker = str(socket)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [a.decode(errors="replace") for a in argv]
        if words and words[0].endswith("containerd-shim-runc-v2") and marker in words:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
    return killed


# ---- mounts -------------------------------------------------------------------------------


def _unescape(path: str) -> str:
    return path.replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")


def mounts_under(roots: Iterable[Path]) -> list[str]:
    tops = [str(r.resolve()) if r.exists() else str(r) for r in roots]
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = _unescape(line.split()[4])
        if any(point == t or point.startswith(t.rstrip("/") + "/") for t in tops):
            found.append(point)
    return found


def unmount_under(roots: list[Path]) -> list[str]:
    """Lazily unmount everything mounted at or under `roots`, deepest first, until none is left
    (a bind mount of a folder onto itself shows once per layer)."""
    done: list[str] = []
    for _ in range(20):
        points = sorted(set(mounts_under(roots)), key=lambda p: p.count("/"), reverse=True)
        if not points:
            break
        for point in points:
            if host.run(["umount", "-l", point], check=False).returncode == 0:
                done.append(point)
    return done


# ---- network, cgroups, folders --------------------------------------------------------------


def delete_links() -> list[str]:
    """The node's address link, the CNI bridge and any veth still attached to it."""
    removed = []
    bridge_ports = Path("/sys/class/net", CNI_BRIDGE, "brif")
    if bridge_ports.is_dir():
        for port in sorted(os.listdir(bridge_ports)):
            host.delete_link(port)
            removed.append(port)
    for name in (CNI_BRIDGE, NODE_LINK):
        if host.link_exists(name):
            host.delete_link(name)
            removed.append(name)
    return removed


def remove_cgroup_tree(relative: str) -> list[str]:
    """rmdir the subtree, deepest first, in every hierarchy (an empty cgroup removes cleanly)."""
    removed = []
    for top in host.cgroup_dirs(relative):
        folders = sorted(
            (p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
        )
        for folder in [*folders, top]:
            with contextlib.suppress(OSError):
                folder.rmdir()
                removed.append(str(folder))
    return removed


def restore_fixed_dirs(before: dict[str, list[str] | None]) -> None:
    """Remove a fixed folder the node created, or what the node added to one that was there."""
    for folder, entries in before.items():
        path = Path(folder)
        if not path.exists():
            continue
        if entries is None:
            shutil.rmtree(path, ignore_errors=True)
            continue
        for entry in os.listdir(path):
            if entry not in entries:
                target = path / entry
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        target.unlink()
