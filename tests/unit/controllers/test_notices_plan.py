"""The notices noun (`controllers.notices.plan`): a notice given now with its grace period, a
standing notice settled (withdrawn whatever its deadline, evicted once the grace is over unless
the pod is being deleted, else kept), a refusal recorded once."""

from __future__ import annotations

from dataclasses import replace

from gpupool.adapters.wire.times import format_time
from gpupool.controllers.notices.plan import (
    EvictPod,
    WithdrawNotice,
    blocked_notice,
    deadline,
    given_and_over,
    grace_over,
    new_notice,
    settle,
)
from gpupool.state.notice import ReclaimNotice
from gpupool.state.pods import PodView

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def view(name: str = "p1", *, deleting: bool = False) -> PodView:
    return PodView(
        namespace="ns",
        name=name,
        uid=f"uid-{name}",
        tenant="beta",
        priority=0,
        submitted_at=NOW - 600,
        request=None,
        problem=None,
        gated=False,
        gate_index=-1,
        phase="Running",
        deleting=deleting,
        node="n1",
        admitted=None,
        queue_note=None,
    )


def test_a_new_notice_evicts_after_its_grace_period() -> None:
    notice = new_notice(NOW, 30, "alpha", "ns/a1", room="n2")
    assert notice == ReclaimNotice(NOW, NOW + 30, "alpha", "ns/a1", room="n2")
    assert not grace_over(notice, NOW + 29.9)
    assert grace_over(notice, NOW + 30)


def test_the_texts_name_the_deadline_and_when_the_notice_was_given() -> None:
    assert deadline(NOW + 30, 30) == f"{format_time(NOW + 30)} (grace period 30s)"
    notice = new_notice(NOW, 30, "alpha", "ns/a1")
    assert given_and_over(notice) == (
        f"notice given at {format_time(NOW)}, grace period over at {format_time(NOW + 30)}"
    )


def test_a_standing_notice_no_longer_wanted_is_withdrawn_even_past_its_deadline() -> None:
    notice = new_notice(NOW, 30, "alpha", "ns/a1")
    for now in (NOW + 1, NOW + 60):
        out = settle(view(), notice, now, withdraw="nobody waits", evicted="evicted")
        assert out == WithdrawNotice(view(), "nobody waits")


def test_a_standing_notice_waits_for_its_grace_then_evicts_with_the_hold() -> None:
    notice = new_notice(NOW, 30, "alpha", "ns/a1")
    assert settle(view(), notice, NOW + 29, withdraw=None, evicted="evicted") is None
    out = settle(
        view(), notice, NOW + 30, withdraw=None, evicted="gone", claimant_uid="u", hold_until=9.0
    )
    assert out == EvictPod(view(), notice, "gone", "u", 9.0)


def test_a_pod_being_deleted_is_not_evicted_again() -> None:
    notice = new_notice(NOW, 30, "alpha", "ns/a1")
    assert settle(view(deleting=True), notice, NOW + 60, withdraw=None, evicted="x") is None


def test_a_refusal_is_recorded_once_and_a_new_one_replaces_it() -> None:
    notice = new_notice(NOW, 30, "alpha", "ns/a1")
    blocked = blocked_notice(notice, "PDB says no")
    assert blocked == replace(notice, blocked="PDB says no")
    assert blocked_notice(blocked, "PDB says no") is None
    assert blocked_notice(blocked, "another PDB") == replace(notice, blocked="another PDB")
