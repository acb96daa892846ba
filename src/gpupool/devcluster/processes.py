"""Component processes: start with a log file, recognise by pid and start time, stop by pid.

A record keeps the process's start time (field 22 of /proc/<pid>/stat) beside its pid, so a
later `down` never signals an unrelated process that reused the pid. Each component runs in its
own session (its pid is its process group), so Ctrl-C in the terminal reaches only gpupool, which
then stops them itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

_PR_SET_PDEATHSIG = 1
# Children started by this process, by pid, until their exit status has been collected.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True, slots=True)
class ProcessRecord:
    """What is needed to find a component's process again, from this or another gpupool process."""

    name: str
    pid: int
    start_ticks: int
    log: str
    argv: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["argv"] = list(self.argv)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProcessRecord:
        return cls(
            name=str(data["name"]),
            pid=int(data["pid"]),
            start_ticks=int(data["start_ticks"]),
            log=str(data["log"]),
            argv=tuple(str(a) for a in data["argv"]),
        )


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of a live pid, None if there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # comm (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])


# Loaded here, not in the child: between fork and exec only the call itself is safe.
_LIBC = ctypes.CDLL(None, use_errno=True)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    _LIBC.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))


def start(
    name: str,
    argv: Sequence[str],
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    die_with_parent: bool = False,
) -> ProcessRecord:
    """Start `argv` with stdout and stderr appended to `log_path`.

    `die_with_parent` makes the kernel send SIGTERM to the component when the starting thread
    exits (test sessions use it so that a killed pytest leaves nothing behind).
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_die_with_parent if die_with_parent else None,
        )
    stat = _stat(proc.pid)
    ticks = stat[1] if stat is not None else 0
    _CHILDREN[proc.pid] = proc
    return ProcessRecord(name, proc.pid, ticks, str(log_path), tuple(argv))


def _reap(pid: int) -> None:
    """Collect the exit status of a child this process started, so it leaves no zombie."""
    child = _CHILDREN.get(pid)
    if child is not None and child.poll() is not None:
        del _CHILDREN[pid]


def is_running(record: ProcessRecord) -> bool:
    """True while the recorded process (same pid and start time) is alive and not a zombie."""
    _reap(record.pid)
    stat = _stat(record.pid)
    if stat is None:
        return False
    state, ticks = stat
    return ticks == record.start_ticks and state not in ("Z", "X")


def stop(record: ProcessRecord, *, grace_s: float = 10.0) -> None:
    """SIGTERM the component's process group, SIGKILL it after `grace_s`; wait until it is gone."""
    if not is_running(record):
        return
    _signal(record, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not is_running(record):
            return
        time.sleep(0.05)
    _signal(record, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while is_running(record) and time.monotonic() < deadline:
        time.sleep(0.05)


def _signal(record: ProcessRecord, sig: signal.Signals) -> None:
    try:
        os.killpg(record.pid, sig)
    except ProcessLookupError:
        return
    except PermissionError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(record.pid, sig)


def tail(path: Path | str, lines: int = 30) -> str:
    """The last `lines` lines of a log file ('' if it does not exist)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            data = handle.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(data.splitlines()[-lines:])
