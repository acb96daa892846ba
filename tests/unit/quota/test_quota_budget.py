"""A budget's standing from leases: running leases count, a fresh meter over the same leases
(a restarted controller) counts the same, windows roll over, the forecast at the current rate."""

from __future__ import annotations

import pytest

from gpupool.domain.units import GiB
from gpupool.quota.book import QuotaBook
from gpupool.quota.budget import budget_status
from gpupool.quota.lease import Lease, LeasePhase
from gpupool.quota.metering import Meter
from gpupool.quota.spec import Budget, OnExhaustion, TenantQuota

HOUR = 3600.0
QUOTA = TenantQuota("a", nominal=100 * GiB, budget=Budget(limit=30.0, window_s=10 * HOUR))


def lease(lid: str, gib: int, start: float, end: float | None = None) -> Lease:
    phase = LeasePhase.ACTIVE if end is None else LeasePhase.RELEASED
    return Lease(lid, "a", gib * GiB, start, gpu_memory_bytes=gib * GiB, phase=phase, ended_at=end)


LEASES = [lease("done", 10, 0.0, 1 * HOUR), lease("running", 5, 1 * HOUR)]


def test_a_running_lease_counts_up_to_now_and_an_ended_one_to_its_end() -> None:
    meter = Meter.snapshot(QuotaBook([QUOTA]), LEASES, 3 * HOUR)
    status = budget_status(QUOTA, meter, LEASES, 3 * HOUR)
    assert status is not None
    assert status.used == pytest.approx(10 + 5 * 2)  # 10 GiB for 1 h, 5 GiB for 2 h
    assert status.remaining == pytest.approx(10.0)
    assert status.rate == pytest.approx(5.0)  # GiB-hours an hour: the running 5 GiB
    assert status.exhausts_at == pytest.approx(5 * HOUR)  # 10 left at 5 an hour
    assert (status.window_start, status.window_end) == (0.0, 10 * HOUR)
    assert not status.exhausted


def test_a_fresh_meter_over_the_same_leases_neither_loses_nor_doubles_hours() -> None:
    book = QuotaBook([QUOTA])
    first = budget_status(QUOTA, Meter.snapshot(book, LEASES, 3 * HOUR), LEASES, 3 * HOUR)
    again = budget_status(QUOTA, Meter.snapshot(book, LEASES, 3 * HOUR), LEASES, 3 * HOUR)
    assert first == again
    # the meter already holds the live leases up to now: passing them again adds nothing
    meter = Meter.snapshot(book, LEASES, 3 * HOUR)
    assert meter.window_usage("a", 3 * HOUR, LEASES) == pytest.approx(20.0)


def test_the_next_window_starts_afresh_but_counts_what_still_runs_in_it() -> None:
    now = 11 * HOUR  # 1 h into the second window; the 5 GiB lease still runs
    status = budget_status(QUOTA, Meter.snapshot(QuotaBook([QUOTA]), LEASES, now), LEASES, now)
    assert status is not None
    assert (status.window_start, status.used) == (10 * HOUR, pytest.approx(5.0))


def test_a_spent_budget_is_exhausted_now_and_one_that_lasts_the_window_has_no_forecast() -> None:
    spent = TenantQuota("a", nominal=100 * GiB, budget=Budget(15.0, 10 * HOUR))
    status = budget_status(
        spent, Meter.snapshot(QuotaBook([spent]), LEASES, 3 * HOUR), LEASES, 3 * HOUR
    )
    assert status is not None and status.exhausted and status.exhausts_at == 3 * HOUR
    roomy = TenantQuota(
        "a", nominal=100 * GiB, budget=Budget(1000.0, 10 * HOUR, OnExhaustion.PREEMPTIBLE)
    )
    status = budget_status(
        roomy, Meter.snapshot(QuotaBook([roomy]), LEASES, 3 * HOUR), LEASES, 3 * HOUR
    )
    assert status is not None and status.exhausts_at is None and not status.exhausted


def test_no_budget_no_status() -> None:
    plain = TenantQuota("a", nominal=GiB)
    assert budget_status(plain, Meter(QuotaBook([plain])), (), 0.0) is None
