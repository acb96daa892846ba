"""bench/live_replay.py's measures: /proc readings (bench/proc_usage.py) and which LIST clients
count as gpupool's components."""

from __future__ import annotations

import os
from pathlib import Path

from support.bench import bench_module

proc_usage = bench_module("proc_usage")
live_replay = bench_module("live_replay")


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
