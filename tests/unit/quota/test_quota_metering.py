from __future__ import annotations

import pytest
from quota_builders import G, lease

from gpupool.quota.book import QuotaBook
from gpupool.quota.metering import Meter
from gpupool.quota.spec import Budget, TenantQuota


def test_closed_lease_is_split_across_windows() -> None:
    book = QuotaBook([TenantQuota(name="a", nominal=100 * G, budget=Budget(100.0, 3600.0))])
    meter = Meter(book)
    one = lease("a", 2 * G, at=1800.0, gpu_memory_bytes=2 * G).release(1800.0 + 7200.0)
    meter.close(one)
    assert meter.window_usage("a", 100.0, ()) == pytest.approx(1.0)  # first half hour
    assert meter.window_usage("a", 3700.0, ()) == pytest.approx(2.0)  # a full hour
    assert meter.window_usage("a", 7300.0, ()) == pytest.approx(1.0)  # last half hour
    assert meter.usage("a", 0.0).gib_hours == pytest.approx(4.0)


def test_live_leases_count_up_to_now() -> None:
    book = QuotaBook([TenantQuota(name="a", nominal=100 * G, budget=Budget(100.0, 3600.0))])
    meter = Meter(book)
    live = lease("a", 4 * G, at=3000.0, gpu_memory_bytes=4 * G, gpu_milli=1000)
    assert meter.window_usage("a", 3600.0 + 900.0, [live]) == pytest.approx(1.0)
    usage = meter.usage("a", 3000.0 + 1800.0, [live])
    assert usage.gib_hours == pytest.approx(2.0)
    assert usage.gpu_hours == pytest.approx(0.5)
    assert usage.leases == 1
