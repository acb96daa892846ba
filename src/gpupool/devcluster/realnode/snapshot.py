"""What of the host a real node could leave behind, captured so that two captures compare:
processes, mounts, network links, iptables rules, cgroups and sysctls.
`tests/e2e/test_real_node_e2e.py` captures before `up` and after `down` and wants no difference.

Other programs share this machine (image builds run their own containers meanwhile), so a
process, mount or cgroup counts only when it is the node's: a process naming the cluster's folder
(`marker`) or living in the node's cgroup root, a mount under that folder or the kubelet's fixed
folders (or a network namespace), a cgroup of the kubelet's or under the node's root. Links,
iptables rules and sysctls count whoever made them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpupool.devcluster.realnode import host
from gpupool.devcluster.realnode.layout import CGROUP_ROOT, FIXED_HOST_DIRS

# The names a cgroup of the node's has: the kubelet's (kubepods, its QoS classes) and ours.
_NODE_CGROUP_NAMES = ("kube", CGROUP_ROOT.strip("/"))
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
        if host.is_dead(int(entry.name)):  # a zombie: dead, waiting to be reaped by init
            continue
        try:
            comm = (entry / "comm").read_text().strip()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cgroups = (entry / "cgroup").read_text()
        except OSError:
            continue
        if (marker and marker in cmdline) or CGROUP_ROOT + "/" in cgroups:
            found.add(f"{entry.name} {comm} {cmdline[:200]}")
    return frozenset(found)


def _mounts(marker: str) -> frozenset[str]:
    roots = [str(d) for d in FIXED_HOST_DIRS] + ([marker] if marker else [])
    found = set()
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        # mount point and filesystem type (field 4 and the one after the ' - ' separator)
        point, kind = line.split()[4], line.split(" - ")[1].split()[0]
        if kind == "nsfs" or any(point == r or point.startswith(r + "/") for r in roots):
            found.add(f"{point} {kind}")
    return frozenset(found)


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
    return frozenset(c for c in found if any(n in Path(c).name for n in _NODE_CGROUP_NAMES))


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
        mounts=_mounts(marker),
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
