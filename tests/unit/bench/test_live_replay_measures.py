"""bench/live_replay.py's measures: /proc readings (bench/proc_usage.py) and which LIST clients
count as gpupool's components."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[3]


def _module(name: str) -> ModuleType:
    if str(ROOT / "bench") not in sys.path:
        sys.path.insert(0, str(ROOT / "bench"))  # live_replay imports its sibling modules
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


proc_usage = _module("proc_usage")
live_replay = _module("live_replay")


def _gone_pid() -> int:
    pid = 4_194_305  # above PID_MAX_LIMIT (2**22), the most pid_max may be: never live
    assert not Path(f"/proc/{pid}").exists()
    return pid


def test_a_live_process_reads_and_a_gone_one_reads_none() -> None:
    assert (proc_usage.rss_mib(os.getpid()) or 0) > 1
    assert (proc_usage.cpu_seconds(os.getpid()) or 0) > 0
    assert proc_usage.rss_mib(_gone_pid()) is None
    assert proc_usage.cpu_seconds(_gone_pid()) is None


def test_a_window_reports_each_process_and_none_for_a_gone_one() -> None:
    window = proc_usage.UsageWindow({"me": os.getpid(), "gone": _gone_pid()}, sample_s=0.01)
    window.suspend()
    window.resume()
    out = window.finish()["components"]
    assert out["me"]["cpu_s_per_min"] is not None and out["me"]["rss_mib_peak"] > 1
    assert out["gone"] == {"cpu_s_per_min": None, "rss_mib": None, "rss_mib_peak": None}


def test_component_lists_leave_out_the_bench_and_kubernetes_own_clients() -> None:
    window = {
        "list_per_minute_by_client_total": {
            "gpupool-controller": 4.0,
            "gpupool-web": 1.5,
            "gpupool-admin": 9.0,  # the bench's own admin kubeconfig
            "system:apiserver": 2.0,
        }
    }
    assert live_replay.with_component_lists(window)["list_per_minute_gpupool_components"] == 5.5
