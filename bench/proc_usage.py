"""CPU seconds and resident memory of processes by pid, from /proc (Linux).

CPU: fields 14 and 15 of /proc/PID/stat (utime, stime) in clock ticks; RSS: VmRSS in
/proc/PID/status. A process that is gone reads as None.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process so far (None once it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw.rsplit(")", 1)[1].split()  # comm (field 2) may hold spaces and ')'
    return (int(fields[11]) + int(fields[12])) / _TICK


def rss_mib(pid: int) -> float | None:
    """The process's resident memory in MiB (None once it is gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024  # kB
    return None


class UsageWindow:
    """CPU seconds per minute of each process over a window, and its RSS: at the end and the
    largest seen by a sampler thread every `sample_s` seconds."""

    def __init__(self, pids: dict[str, int], sample_s: float = 2.0) -> None:
        self.pids = dict(pids)
        self.cpu: dict[str, float | None] = dict.fromkeys(self.pids, 0.0)
        self.active_s = 0.0
        self.peak: dict[str, float] = {}
        self.resume()
        self._stop = threading.Event()
        self._sample()
        self._thread = threading.Thread(target=self._run, args=(sample_s,), daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        for name, pid in self.pids.items():
            rss = rss_mib(pid)
            if rss is not None:
                self.peak[name] = max(rss, self.peak.get(name, 0.0))

    def _run(self, sample_s: float) -> None:
        while not self._stop.wait(sample_s):
            self._sample()

    def resume(self) -> None:
        """Count from now on (after `suspend`: what came between is left out)."""
        self.cpu_start = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        self.started = time.monotonic()

    def suspend(self) -> None:
        self.active_s += time.monotonic() - self.started
        for name, pid in self.pids.items():
            begin, end, so_far = self.cpu_start[name], cpu_seconds(pid), self.cpu[name]
            if begin is None or end is None or so_far is None:
                self.cpu[name] = None  # gone at some point: its figure would be partial
            else:
                self.cpu[name] = so_far + end - begin

    def finish(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join()
        self._sample()
        self.suspend()
        minutes = self.active_s / 60
        out: dict[str, Any] = {"window_s": round(self.active_s, 1), "components": {}}
        for name, pid in self.pids.items():
            used = self.cpu[name]
            out["components"][name] = {
                "cpu_s_per_min": None if used is None else round(used / minutes, 3),
                "rss_mib": None if (rss := rss_mib(pid)) is None else round(rss, 1),
                "rss_mib_peak": round(self.peak[name], 1) if name in self.peak else None,
            }
        return out
