from __future__ import annotations

import pytest

from gpupool.domain.units import GiB
from gpupool.quota.lease import IllegalLeaseTransition, Lease, LeasePhase


def make(**kw: object) -> Lease:
    return Lease(id="l1", tenant="a", amount=GiB, reserved_at=100.0, **kw)  # type: ignore[arg-type]


def test_happy_path_records_times_and_meters_gib_hours() -> None:
    lease = make(gpu_memory_bytes=12 * GiB, gpu_milli=500)
    lease = lease.bind(110.0).activate(120.0).release(100.0 + 3600.0)
    assert lease.phase is LeasePhase.RELEASED
    assert (lease.bound_at, lease.active_at, lease.ended_at) == (110.0, 120.0, 3700.0)
    assert lease.gib_hours(99999.0) == pytest.approx(12.0)
    assert lease.gpu_hours(99999.0) == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("path", "illegal"),
    [
        ([], "activate"),  # reserved -> active skips bind
        (["bind", "activate"], "bind"),
        (["release"], "bind"),
        (["lose"], "release"),
        (["bind", "release"], "activate"),
    ],
)
def test_illegal_transitions_raise(path: list[str], illegal: str) -> None:
    lease = make()
    for step in path:
        lease = getattr(lease, step)(200.0)
    with pytest.raises(IllegalLeaseTransition, match="cannot go from"):
        getattr(lease, illegal)(300.0)


def test_reclaim_only_borrowed_or_preemptible() -> None:
    with pytest.raises(IllegalLeaseTransition, match="only borrowed or preemptible"):
        make().bind(101.0).reclaim(102.0)
    assert make(borrowed=True).reclaim(101.0).phase is LeasePhase.RECLAIMED
    assert make(preemptible=True).bind(101).activate(102).reclaim(103).phase is LeasePhase.RECLAIMED
    with pytest.raises(IllegalLeaseTransition):
        make(borrowed=True, exclusive=True).reclaim(101.0)


def test_ttl_expiry_and_renewal() -> None:
    lease = make(ttl_s=60.0)
    assert lease.expires_at == 160.0
    assert not lease.is_due(159.0)
    with pytest.raises(IllegalLeaseTransition, match="expires at 160"):
        lease.expire(150.0)
    renewed = lease.bind(150.0).renew(150.0)
    assert renewed.expires_at == 210.0
    assert renewed.is_due(210.0)
    expired = renewed.expire(500.0)
    assert expired.phase is LeasePhase.EXPIRED
    assert expired.ended_at == 210.0  # metering stops at the expiry, not when it was noticed
    with pytest.raises(IllegalLeaseTransition, match="too late"):
        renewed.renew(211.0)
    with pytest.raises(IllegalLeaseTransition, match="no TTL"):
        make().renew(101.0)
    with pytest.raises(IllegalLeaseTransition, match="cannot renew a released"):
        lease.release(120.0).renew(121.0)


def test_time_before_reservation_is_illegal() -> None:
    with pytest.raises(IllegalLeaseTransition, match="before its reservation"):
        make().bind(50.0)


def test_an_expiry_noticed_late_is_metered_to_when_the_capacity_was_given_back() -> None:
    lease = make(ttl_s=60.0).bind(100.0).activate(100.0)
    late = lease.expire(200.0, held_until=190.0)  # the pod held its card through its grace
    assert late.phase is LeasePhase.EXPIRED and late.ended_at == 190.0
    assert lease.expire(200.0, held_until=150.0).ended_at == 160.0  # never before the expiry
