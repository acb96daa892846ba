"""What a real node needs of the host, and the small host operations `up` and `down` share:
the node's address link, sysctls, and iptables chains. Commands run with argument lists (no
shell); each failure is a typed error that says what to do."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gpupool.devcluster.errors import RealNodeUnsupported

SETUP_COMMAND = "tools/realnode/setup.sh  (or: make realnode)"
# containerd v2, built by tools/realnode/build-containerd.sh (setup.sh runs it) from the wrapper
# module tools/realnode/containerd, whose go.mod names the same version (a unit test checks it).
CONTAINERD_VERSION = "v2.4.2"
CONTAINERD_BIN_ENV = "GPUPOOL_CONTAINERD_BIN"
CONTAINERD_COMMANDS = ("containerd", "containerd-shim-runc-v2", "ctr")
# Where Debian's containernetworking-plugins puts the plugins, then the upstream default.
CNI_BIN_DIRS = (Path("/usr/lib/cni"), Path("/opt/cni/bin"))
CGROUP_V1 = Path("/sys/fs/cgroup")
_CGROUP_CONTROLLERS = ("cpu", "memory", "pids", "devices", "freezer")
IPTABLES = ("iptables", "ip6tables")
IPTABLES_TABLES = ("filter", "nat", "mangle")


@dataclass(frozen=True, slots=True)
class HostTools:
    containerd: Path
    runc: Path
    ctr: Path
    cni_bin_dir: Path
    # the runc shim built with this containerd (containerd's CRI config names it by path)
    shim: Path


def containerd_bin_dir() -> Path:
    """$GPUPOOL_CONTAINERD_BIN, else ~/.cache/gpupool/containerd/containerd-<version>/bin."""
    override = os.environ.get(CONTAINERD_BIN_ENV)
    if override:
        return Path(override)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "gpupool" / "containerd" / f"containerd-{CONTAINERD_VERSION}" / "bin"


def _which(name: str) -> Path | None:
    found = shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    return Path(found) if found else None


def unsupported_reason() -> str | None:
    """Why this host cannot run a real node at all (not a missing package), or None."""
    if os.geteuid() != 0:
        return "a real node needs root (the kubelet manages cgroups, mounts and links)"
    missing = [c for c in _CGROUP_CONTROLLERS if not (CGROUP_V1 / c).is_dir()]
    if missing:
        return (
            f"a real node needs the cgroup v1 hierarchies mounted under {CGROUP_V1} "
            f"(missing: {', '.join(missing)})"
        )
    if "overlay" not in Path("/proc/filesystems").read_text():
        return "a real node needs the overlay filesystem (containerd's overlayfs snapshotter)"
    return None


def _built(folder: Path, name: str) -> Path | None:
    path = folder / name
    return path if path.is_file() and os.access(path, os.X_OK) else None


def host_tools() -> HostTools:
    """containerd v2 (its shim and ctr), runc and the CNI plugins, or RealNodeUnsupported
    naming the setup."""
    reason = unsupported_reason()
    if reason is not None:
        raise RealNodeUnsupported(reason)
    built = containerd_bin_dir()
    tools = {name: _built(built, name) for name in CONTAINERD_COMMANDS}
    missing = [f"{name} {CONTAINERD_VERSION} (in {built})" for name, p in tools.items() if not p]
    tools |= {name: _which(name) for name in ("runc", "ip", "iptables")}
    missing += [name for name in ("runc", "ip", "iptables") if tools[name] is None]
    cni = next((d for d in CNI_BIN_DIRS if (d / "bridge").is_file()), None)
    if cni is None:
        missing.append(f"the CNI plugins (bridge, host-local, loopback in {CNI_BIN_DIRS[0]})")
    if missing:
        raise RealNodeUnsupported(
            f"missing on this host: {', '.join(missing)}; install them with: {SETUP_COMMAND}"
        )
    assert cni is not None
    containerd, runc, ctr, shim = (
        tools[n] for n in ("containerd", "runc", "ctr", "containerd-shim-runc-v2")
    )
    assert containerd is not None and runc is not None and ctr is not None and shim is not None
    return HostTools(containerd, runc, ctr, cni, shim)


def run(argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a host command; RealNodeUnsupported with its output when it fails and `check`."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    if check and done.returncode != 0:
        raise RealNodeUnsupported(
            f"`{' '.join(argv)}` failed (exit {done.returncode}): "
            f"{(done.stderr or done.stdout).strip()}"
        )
    return done


# ---- links ----------------------------------------------------------------------------------


def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def add_address_link(name: str, address: str) -> None:
    """A bridge without ports holding `address`/32: a stable, non-loopback node IP."""
    if not link_exists(name):
        run(["ip", "link", "add", name, "type", "bridge"])
    run(["ip", "addr", "replace", f"{address}/32", "dev", name])
    run(["ip", "link", "set", name, "up"])


def delete_link(name: str) -> None:
    if link_exists(name):
        run(["ip", "link", "delete", name], check=False)


# ---- sysctls --------------------------------------------------------------------------------


def _sysctl_path(key: str) -> Path:
    return Path("/proc/sys", *key.split("."))


def read_sysctls(keys: Iterable[str]) -> dict[str, str]:
    values = {}
    for key in keys:
        try:
            values[key] = _sysctl_path(key).read_text().strip()
        except OSError:
            continue
    return values


def restore_sysctls(before: Mapping[str, str]) -> list[str]:
    """Write back every value that differs now; return the keys restored."""
    restored = []
    for key, value in before.items():
        path = _sysctl_path(key)
        try:
            if path.read_text().strip() != value:
                path.write_text(value + "\n")
                restored.append(key)
        except OSError:
            continue
    return restored


# ---- iptables -------------------------------------------------------------------------------


def iptables_chains() -> dict[str, list[str]]:
    """'iptables:filter' -> its chain names, for both families and every table we watch."""
    chains: dict[str, list[str]] = {}
    for family in IPTABLES:
        if _which(family) is None:
            continue
        for table in IPTABLES_TABLES:
            done = run([family, "-w", "-t", table, "-S"], check=False)
            if done.returncode != 0:
                continue
            names = [
                line.split()[1] for line in done.stdout.splitlines() if line[:3] in ("-N ", "-P ")
            ]
            chains[f"{family}:{table}"] = names
    return chains


def remove_new_chains(before: Mapping[str, list[str]]) -> list[str]:
    """Delete the chains made since `before` (the kubelet's KUBE-FIREWALL, KUBE-KUBELET-CANARY
    and friends) and every rule that jumps to them; return 'family:table:chain' of each."""
    removed = []
    for where, names in iptables_chains().items():
        family, table = where.split(":")
        new = [n for n in names if n not in before.get(where, [])]
        if not new:
            continue
        rules = run([family, "-w", "-t", table, "-S"], check=False).stdout.splitlines()
        for rule in rules:
            parts = rule.split()
            if parts[:1] == ["-A"] and any(p in new for p in parts[2:]):
                run([family, "-w", "-t", table, "-D", *parts[1:]], check=False)
        for name in new:
            run([family, "-w", "-t", table, "-F", name], check=False)
        for name in new:
            run([family, "-w", "-t", table, "-X", name], check=False)
            removed.append(f"{where}:{name}")
    return removed


# ---- cgroups --------------------------------------------------------------------------------


def mounted_hierarchies() -> list[Path]:
    """Every mounted cgroup hierarchy (the v1 controllers and the unified one beside them)."""
    hierarchies = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2] in ("cgroup", "cgroup2"):
            hierarchies.append(Path(parts[1]))
    return hierarchies


def cgroup_dirs(relative: str) -> list[Path]:
    """The folder of cgroup `relative` in every hierarchy that has it."""
    found = []
    for mount in mounted_hierarchies():
        folder = mount / relative.lstrip("/")
        if folder.is_dir():
            found.append(folder)
    return found


def make_cgroup(relative: str) -> None:
    """Create cgroup `relative` in every hierarchy (the kubelet wants its cgroup root to exist)."""
    for mount in mounted_hierarchies():
        (mount / relative.lstrip("/")).mkdir(exist_ok=True)


def is_dead(pid: int) -> bool:
    """Whether process `pid` is gone or a zombie (dead, its pid entry waiting for a parent to
    reap it: whoever inherited it once its shim was killed; nothing of it is left to stop)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    # `pid (comm) state ...`: comm may hold spaces and parentheses, the state follows the last ')'
    return stat.rsplit(")", 1)[-1].split()[:1] == ["Z"]
