"""The steps of a reclaim round (`controllers.reclaim.plan`), each on its own: the standing
notices, a lease's cohort, notices for quota and for room, the room already being made, and
what becomes of a standing notice. `plan_reclaim_round` over them is tested in
`test_controller_reclaim_plan` and `test_controller_room_reclaim_plan`."""

from __future__ import annotations

from test_controller_reclaim_plan import NOW, beta_pods, lease, quotas
from test_controller_reclaim_plan import pod as quota_pod
from test_controller_room_reclaim_plan import full_cluster, marks, placed, waiting
from test_controller_room_reclaim_plan import quotas as room_quotas

from gpupool.adapters.wire.names import DEFAULT_TENANT
from gpupool.controllers.admission.charge import mark_borrowed
from gpupool.controllers.admission.plan import AdmissionPlan, plan_admission
from gpupool.controllers.notices.plan import EvictPod, WithdrawNotice
from gpupool.controllers.reclaim.plan import (
    ROOM_HOLD_S,
    RoundState,
    lease_cohort,
    plan_quota_notices,
    plan_room_notices,
    room_standing,
    settle_notice,
    standing_notices,
)
from gpupool.quota.spec import TenantQuota
from gpupool.state.lease import LeaseRecord, RoomHold
from gpupool.state.notice import ReclaimNotice
from gpupool.state.pods import PodView


def admission_of(
    pods: list[PodView], leases: list[LeaseRecord], tenants: list[TenantQuota]
) -> tuple[list[PodView], AdmissionPlan]:
    views = mark_borrowed(pods, leases)
    return views, plan_admission(views, tenants, NOW, default_tenant=DEFAULT_TENANT)


def state_of(views: list[PodView], pending: set[str] | None = None) -> RoundState:
    return RoundState(NOW, {(p.uid or p.key): p for p in views}, set(pending or ()))


def test_standing_notices_are_those_on_pods_that_hold_quota() -> None:
    notice = ReclaimNotice(NOW, NOW + 3, "alpha", "ns/a1")
    beta = beta_pods(b4={"notice": notice})
    waiting_pod = quota_pod("a1", "alpha", submitted=50, notice=notice)  # holds no quota
    _, admission = admission_of([*beta, waiting_pod], [lease(p) for p in beta], quotas())
    noticed = standing_notices([*beta, waiting_pod], admission.ledger)
    assert list(noticed) == ["uid-b4"] and noticed["uid-b4"][1] == notice


def test_a_leases_cohort_is_its_tenants_and_none_without_the_lease() -> None:
    beta = beta_pods()
    _, admission = admission_of(beta, [lease(p) for p in beta], quotas())
    assert lease_cohort(admission.ledger, "uid-b1") == "c"
    assert lease_cohort(admission.ledger, "uid-nobody") is None


def test_quota_notices_take_the_newest_borrower_and_sum_the_cohorts_need() -> None:
    beta = beta_pods()
    pods = [*beta, quota_pod("a1", "alpha", submitted=50)]
    views, admission = admission_of(pods, [lease(p) for p in beta], quotas())
    state = state_of(views)
    needed = plan_quota_notices(admission, state)
    assert needed == {"c": admission.reclaim[0].needed}
    assert [n.pod.name for n in state.notices] == ["b4"] and state.pending == {"uid-b4"}
    assert "tenant alpha needs its quota back" in state.notices[0].message
    assert "grace period 3s" in state.notices[0].message and state.stuck == []


def test_quota_notices_count_a_pending_notice_first() -> None:
    beta = beta_pods()
    pods = [*beta, quota_pod("a1", "alpha", submitted=50)]
    views, admission = admission_of(pods, [lease(p) for p in beta], quotas())
    state = state_of(views, {"uid-b4"})
    assert plan_quota_notices(admission, state) == {"c": admission.reclaim[0].needed}
    assert state.notices == []


def test_quota_notices_leave_a_pod_stuck_when_nothing_borrowed_can_go() -> None:
    beta = beta_pods(b3={"borrowed_gib": 0}, b4={"borrowed_gib": 0})
    pods = [*beta, quota_pod("a1", "alpha", submitted=50)]
    views, admission = admission_of(pods, [lease(p) for p in beta], quotas())
    state = state_of(views)
    assert plan_quota_notices(admission, state) == {"c": 0}
    [stuck] = state.stuck
    assert stuck.pod.name == "a1" and "free at most 0" in stuck.reason
    assert state.notices == []


def test_room_standing_keeps_the_room_of_a_waiting_pod_and_ends_the_rest() -> None:
    a1 = waiting("a1")
    room = ReclaimNotice(NOW, NOW + 3, "alpha", "ns/a1", room="n2")
    gone = ReclaimNotice(NOW, NOW + 3, "alpha", "ns/gone", room="n1")
    b3, b4 = full_cluster()[2:]
    noticed = {"uid-b4": (b4, room), "uid-b3": (b3, gone)}
    holds = {
        "ns/old": RoomHold("n1", "ns/x", "uid-x", NOW + 10),
        "ns/over": RoomHold("n1", "ns/y", "uid-y", NOW - 1),
    }
    standing = room_standing(noticed, [a1, b3, b4], holds, NOW)
    assert standing.held == {"ns/a1": "n2"}
    assert standing.gone == {"uid-b3": "the pod is gone"}
    [ended] = standing.ended_holds
    assert ended.lease_key == "ns/old" and "the pod is gone" in ended.message


def test_room_notices_clear_one_node_for_the_waiting_pod() -> None:
    pods = [*full_cluster(), waiting()]
    views, admission = admission_of(pods, marks(pods), room_quotas())
    state = state_of(views)
    plan_room_notices(views, admission.ledger, placed(pods), {}, state)
    [notice] = state.notices
    assert notice.pod.name == "b4" and notice.notice.room == "n2"
    assert notice.message.startswith("reclaim for room on node n2 for pod ns/a1")
    assert state.pending == {"uid-b4"} and state.stuck == []


def test_settle_withdraws_a_quota_notice_nobody_needs_any_more() -> None:
    b4 = beta_pods()[3]
    notice = ReclaimNotice(NOW, NOW + 3, "alpha", "ns/a1")
    out = settle_notice(b4, notice, "c", {}, None, {}, NOW)
    assert isinstance(out, WithdrawNotice) and "nobody in its cohort waits" in out.message


def test_settle_withdraws_a_room_notice_whose_room_is_gone() -> None:
    b4 = beta_pods()[3]
    notice = ReclaimNotice(NOW, NOW + 3, "alpha", "ns/a1", room="n2")
    out = settle_notice(b4, notice, "c", {}, "the pod is gone", {}, NOW)
    assert isinstance(out, WithdrawNotice) and out.message.endswith("withdrawn: the pod is gone")


def test_settle_waits_for_the_grace_period_then_evicts() -> None:
    b4 = beta_pods()[3]
    notice = ReclaimNotice(NOW, NOW + 3, "alpha", "ns/a1")
    assert settle_notice(b4, notice, "c", {"c": 1}, None, {}, NOW + 2) is None
    out = settle_notice(b4, notice, "c", {"c": 1}, None, {}, NOW + 3)
    assert isinstance(out, EvictPod) and "give tenant alpha its quota back" in out.message
    assert out.claimant_uid == "" and out.hold_until is None


def test_settle_evicts_for_room_with_a_hold_for_the_claimant() -> None:
    b4, a1 = full_cluster()[3], waiting("a1")
    notice = ReclaimNotice(NOW, NOW + 3, "alpha", "ns/a1", room="n2")
    out = settle_notice(b4, notice, "c", {}, None, {"ns/a1": a1}, NOW + 3)
    assert isinstance(out, EvictPod) and "make room on node n2" in out.message
    assert out.claimant_uid == "uid-a1" and out.hold_until == NOW + 3 + ROOM_HOLD_S
