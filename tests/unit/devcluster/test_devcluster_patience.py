"""The waits that grow with the cluster (devcluster/patience.py and readiness.wait_progress):
given readings and a clock, when a wait gives up and what it says."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from gpupool.devcluster import processes, readiness
from gpupool.devcluster.errors import ComponentNotReady
from gpupool.devcluster.patience import (
    Allowance,
    ProgressWatch,
    Reading,
    Verdict,
    poll_interval_s,
)
from gpupool.devcluster.processes import ProcessRecord


def run(
    readings: Sequence[Reading | None], times: Sequence[float], allowance: Allowance, items: int
) -> tuple[Verdict, ProgressWatch, float]:
    watch = ProgressWatch("nodes Ready", items, allowance, now=0.0)
    verdict = Verdict.WAIT
    now = 0.0
    for reading, now in zip(readings, times, strict=True):
        verdict = watch.observe(reading, now)
        if verdict is not Verdict.WAIT:
            break
    return verdict, watch, now


def test_all_done_is_ready_at_once() -> None:
    verdict, _, _ = run([Reading(3, 3)], [0.5], Allowance(60), 3)
    assert verdict is Verdict.READY


def test_nothing_to_wait_for_is_ready() -> None:
    assert ProgressWatch("x", 0, Allowance(1), 0.0).observe(Reading(0, 0), 0.0) is Verdict.READY


def test_keeps_waiting_past_the_stall_window_while_the_count_grows() -> None:
    # 1,213 nodes, 10 more every 30 s: 30 s apart is within a 60 s stall window, and the
    # whole wait (about 1 h) would pass the cap, so stop the readings before it.
    times = [30.0 * i for i in range(1, 21)]
    readings = [Reading(10 * i, 1213) for i in range(1, 21)]
    verdict, watch, now = run(readings, times, Allowance(60, 0.5), 1213)
    assert verdict is Verdict.WAIT
    assert now == 600.0 > 60.0
    assert watch.reason == ""


def test_gives_up_when_the_count_stops_growing_for_the_stall_window() -> None:
    readings: list[Reading | None] = [Reading(400, 1213), Reading(812, 1213)]
    readings += [Reading(812, 1213)] * 7
    times = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 81.0]
    verdict, watch, now = run(readings, times, Allowance(60, 0.5), 1213)
    assert verdict is Verdict.GIVE_UP
    assert now == 81.0  # 61 s after the last new node (at 20 s)
    assert watch.reason == "812 of 1213 nodes Ready after 81s: stuck, none more in the last 61s"


def test_a_count_that_never_starts_gives_up_after_the_stall_window() -> None:
    verdict, watch, now = run([Reading(0, 5)] * 3, [30.0, 60.0, 60.5], Allowance(60, 0.5), 5)
    assert verdict is Verdict.GIVE_UP
    assert now == 60.5
    assert watch.reason == "0 of 5 nodes Ready: none in 60s"


def test_no_answer_at_all_gives_up_after_the_stall_window() -> None:
    verdict, watch, _ = run([None, None], [30.0, 61.0], Allowance(60, 0.5), 5)
    assert verdict is Verdict.GIVE_UP
    assert watch.reason == "no answer about nodes Ready in 61s"


def test_no_answer_for_a_while_after_progress_counts_as_a_stall() -> None:
    verdict, watch, _ = run([Reading(3, 5), None, None], [5.0, 30.0, 66.0], Allowance(60), 5)
    assert verdict is Verdict.GIVE_UP
    assert watch.reason == "3 of 5 nodes Ready after 66s: stuck, none more in the last 61s"


def test_slow_steady_progress_gives_up_at_the_cap_that_grows_with_the_nodes() -> None:
    # One more node every 50 s never stalls a 60 s window, but 100 nodes may take
    # 60 + 0.5 × 100 = 110 s in all.
    times = [50.0, 100.0, 150.0]
    readings = [Reading(1, 100), Reading(2, 100), Reading(3, 100)]
    verdict, watch, now = run(readings, times, Allowance(60, 0.5), 100)
    assert verdict is Verdict.GIVE_UP
    assert now == 150.0
    assert watch.reason == (
        "3 of 100 nodes Ready after 150s, over the allowance of 110s = 60s + 0.5s per node × 100"
    )


def test_the_cap_grows_with_the_cluster() -> None:
    assert Allowance(60, 0.5).limit_s(0) == 60
    assert Allowance(60, 0.5).limit_s(1213) == pytest.approx(666.5)
    assert Allowance(60).describe(1213, "node") == "60s"


def test_a_count_that_drops_and_recovers_only_counts_new_highs_as_progress() -> None:
    readings = [Reading(5, 10), Reading(2, 10), Reading(5, 10), Reading(5, 10)]
    verdict, watch, _ = run(readings, [1.0, 20.0, 40.0, 62.0], Allowance(60), 10)
    assert verdict is Verdict.GIVE_UP
    assert watch.reason.startswith("5 of 10 nodes Ready after 62s: stuck")


def test_poll_interval_grows_with_the_nodes_within_bounds() -> None:
    assert poll_interval_s(4) == 0.1
    assert poll_interval_s(1213) == pytest.approx(1.213)
    assert poll_interval_s(50_000) == 2.0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def record(tmp_path: Path) -> ProcessRecord:
    log = tmp_path / "kwok.log"
    log.write_text("kwok: starting\nkwok: still starting\n")
    return ProcessRecord("kwok", 1, 0, str(log), ("kwok",))


def test_wait_progress_returns_when_all_are_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(processes, "is_running", lambda _r: True)
    clock = Clock()
    readings = iter([Reading(0, 3), Reading(2, 3), Reading(3, 3)])
    watch = ProgressWatch("nodes Ready", 3, Allowance(60), clock())
    readiness.wait_progress(
        record(tmp_path), watch, lambda: next(readings), interval_s=1.5, clock=clock,
        sleep=clock.sleep,
    )  # fmt: skip
    assert clock.sleeps == [1.5, 1.5]


def test_wait_progress_gives_up_with_the_reason_and_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(processes, "is_running", lambda _r: True)
    clock = Clock()
    watch = ProgressWatch("nodes Ready", 5, Allowance(10), clock())
    with pytest.raises(ComponentNotReady) as info:
        readiness.wait_progress(
            record(tmp_path), watch, lambda: Reading(2, 5), interval_s=1.0, clock=clock,
            sleep=clock.sleep,
        )  # fmt: skip
    assert clock.now == 11.0
    message = str(info.value)
    assert message.startswith("kwok did not become ready: 2 of 5 nodes Ready after 11s: stuck")
    assert "kwok: still starting" in message


def test_wait_progress_stops_when_the_process_exits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(processes, "is_running", lambda _r: False)
    clock = Clock()
    watch = ProgressWatch("nodes Ready", 5, Allowance(60), clock())
    with pytest.raises(ComponentNotReady, match="the process exited"):
        readiness.wait_progress(
            record(tmp_path), watch, lambda: Reading(0, 5), interval_s=1.0, clock=clock,
            sleep=clock.sleep,
        )  # fmt: skip
    assert clock.sleeps == []
