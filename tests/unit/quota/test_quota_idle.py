"""Idle lending: a lender's quota used within its idle time is not lent; idle time 0 lends at
once (the behaviour before the option)."""

from __future__ import annotations

from gpupool.quota.admission import Admit, Ask, Wait, WaitReason, decide
from gpupool.quota.book import QuotaBook
from gpupool.quota.idle import recent_peak
from gpupool.quota.lease import Lease, LeasePhase
from gpupool.quota.ledger import Ledger
from gpupool.quota.metering import Meter
from gpupool.quota.resource import Resource
from gpupool.quota.spec import TenantQuota


def _lease(lid: str, tenant: str, milli: int, start: float, end: float | None = None) -> Lease:
    phase = LeasePhase.ACTIVE if end is None else LeasePhase.RELEASED
    return Lease(lid, tenant, milli, start, phase=phase, ended_at=end)


def test_the_peak_is_the_most_held_at_once_within_the_interval() -> None:
    leases = [
        _lease("old", "a", 4000, 0.0, 50.0),  # ended before the interval: not counted
        _lease("x", "a", 1000, 60.0, 120.0),
        _lease("y", "a", 2000, 100.0, 150.0),  # overlaps x: 3000 at once
        _lease("z", "a", 500, 140.0),  # still running
    ]
    peak = recent_peak(leases, since=55.0, now=200.0, idle_s=145.0)
    assert peak.amount == 3000
    assert peak.falls_at == 120.0 + 145.0  # the first end inside the interval, plus the idle time


def _setup(idle_s: float) -> tuple[Ledger, Meter]:
    lender = TenantQuota(
        "lender", 2000, resource=Resource.GPU, cohort="c", lend_after_idle_s=idle_s
    )
    borrower = TenantQuota("borrower", 1000, resource=Resource.GPU, cohort="c")
    book = QuotaBook([lender, borrower])
    ledger, meter = Ledger(book), Meter(book)
    meter.close(_lease("job", "lender", 2000, 0.0, 100.0))  # the lender's job ended at t=100
    ledger.add(_lease("b1", "borrower", 1000, 0.0))  # the borrower holds its nominal
    return ledger, meter


def test_idle_time_zero_lends_the_moment_the_quota_is_unused() -> None:
    ledger, meter = _setup(0.0)
    verdict = decide(ledger, Ask("borrower", 1000), 110.0, meter)
    assert isinstance(verdict, Admit) and verdict.borrowed


def test_quota_used_within_the_idle_time_is_not_lent_until_it_has_been_idle_that_long() -> None:
    ledger, meter = _setup(300.0)
    verdict = decide(ledger, Ask("borrower", 1000), 110.0, meter)
    assert isinstance(verdict, Wait) and verdict.reason is WaitReason.LENDER_NOT_IDLE
    assert verdict.retry_at == 400.0  # the job's end plus the idle time
    assert "not been idle" not in verdict.detail and "idle time before lending" in verdict.detail
    verdict = decide(ledger, Ask("borrower", 1000), 400.0, meter)
    assert isinstance(verdict, Admit) and verdict.borrowed


def test_the_lender_itself_may_use_its_held_quota_at_once() -> None:
    ledger, meter = _setup(300.0)
    verdict = decide(ledger, Ask("lender", 2000), 110.0, meter)
    assert isinstance(verdict, Admit) and not verdict.borrowed
