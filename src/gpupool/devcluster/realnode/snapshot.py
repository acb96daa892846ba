"""What of the host a real node could leave behind, captured so that two captures compare:
processes of the node's programs, mounts, network links, iptables rules, cgroups and sysctls.
`tests/e2e/test_real_node_e2e.py` captures before `up` and after `down` and wants no difference.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpupool.devcluster.realnode import host

# The programs a real node runs (comm, which the kernel cuts to 15 characters).
NODE_PROGRAMS = ("containerd", "containerd-shim", "kubelet", "runc", "pause", "gpu_probe")
_SYSCTL_TREES = ("kernel", "vm", "net/ipv4", "net/bridge", "net/core")
# Counters and per-boot values that change on their own, and per-link settings (links are
# compared on their own).
_SYSCTL_SKIP = (
    "kernel/random",
    "kernel/ns_last_pid",
    "kernel/pty/nr",
    "kernel/tainted",
    "net/ipv4/conf",
    "net/ipv4/neigh",
    "net/ipv4/route/flush",
    "net/core/bpf_jit",
    "kernel/perf_event",
    "kernel/cad_pid",
    "vm/stat_refresh",
    "vm/drop_caches",
    "vm/compact_memory",
)


@dataclass(frozen=True, slots=True)
class HostSnapshot:
    processes: frozenset[str]
    mounts: frozenset[str]
    links: frozenset[str]
    iptables: frozenset[str]
    cgroups: frozenset[str]
    sysctls: Mapping[str, str]


def _processes(marker: str) -> frozenset[str]:
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if comm in NODE_PROGRAMS or (marker and marker in cmdline):
            found.add(f"{entry.name} {comm} {cmdline[:200]}")
    return frozenset(found)


def _mounts() -> frozenset[str]:
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    # mount point and filesystem type (field 4 and the one after the ' - ' separator)
    return frozenset(f"{ln.split()[4]} {ln.split(' - ')[1].split()[0]}" for ln in lines)


def _iptables() -> frozenset[str]:
    rules: set[str] = set()
    for family in host.IPTABLES:
        for table in host.IPTABLES_TABLES:
            done = host.run([family, "-w", "-t", table, "-S"], check=False)
            if done.returncode == 0:
                rules.update(f"{family} {table} {line}" for line in done.stdout.splitlines())
    return frozenset(rules)


def _cgroups() -> frozenset[str]:
    found = set()
    for line in Path("/proc/self/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) < 3 or parts[2] not in ("cgroup", "cgroup2"):
            continue
        top = Path(parts[1])
        for level1 in _subdirs(top):
            found.add(str(level1))
            found.update(str(p) for p in _subdirs(level1))
    return frozenset(found)


def _subdirs(folder: Path) -> list[Path]:
    try:
        return [p for p in folder.iterdir() if p.is_dir()]
    except OSError:
        return []


def _sysctls() -> dict[str, str]:
    values = {}
    root = Path("/proc/sys")
    for tree in _SYSCTL_TREES:
        for dirpath, dirnames, filenames in os.walk(root / tree):
            relative = os.path.relpath(dirpath, root)
            dirnames[:] = [d for d in dirnames if not _skipped(f"{relative}/{d}")]
            for name in filenames:
                key = f"{relative}/{name}"
                if _skipped(key):
                    continue
                try:
                    values[key.replace("/", ".")] = (Path(dirpath) / name).read_text().strip()
                except OSError:
                    continue
    return values


def _skipped(key: str) -> bool:
    return any(key == s or key.startswith(s + "/") for s in _SYSCTL_SKIP)


def capture(marker: str = "") -> HostSnapshot:
    """The host now; `marker` (e.g. the state folder) also catches processes naming it."""
    return HostSnapshot(
        processes=_processes(marker),
        mounts=_mounts(),
        links=frozenset(os.listdir("/sys/class/net")),
        iptables=_iptables(),
        cgroups=_cgroups(),
        sysctls=_sysctls(),
    )


def left_behind(before: HostSnapshot, after: HostSnapshot) -> dict[str, list[str]]:
    """What `after` has that `before` had not (and sysctls whose value changed), by kind."""
    changed = sorted(
        f"{k}: {before.sysctls.get(k)} -> {v}"
        for k, v in after.sysctls.items()
        if k in before.sysctls and before.sysctls[k] != v
    )
    found = {
        "processes": sorted(after.processes - before.processes),
        "mounts": sorted(after.mounts - before.mounts),
        "links": sorted(after.links - before.links),
        "iptables": sorted(after.iptables - before.iptables),
        "cgroups": sorted(after.cgroups - before.cgroups),
        "sysctls": changed,
    }
    return {kind: items for kind, items in found.items() if items}
