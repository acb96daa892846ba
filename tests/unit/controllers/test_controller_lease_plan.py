"""The lease lifecycle's pure plan."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpupool.adapters.kubernetes.lease import lease_from_json, phase_name
from gpupool.adapters.kubernetes.pod_view import read_pod
from gpupool.adapters.wire.times import format_time
from gpupool.controllers.leases.plan import Move, plan_leases
from gpupool.quota.lease import ALLOWED, LeasePhase

T0 = 1_700_000_000.0


EVICTED = "evicted to give tenant beta its quota back (notice given at ...)"


def lease(
    phase: str | None = None,
    *,
    end: float | None = None,
    expiry: float | None = None,
    reclaim: dict[str, Any] | None = None,
) -> Any:
    status: dict[str, Any] = {"start": format_time(T0)}
    if phase:
        status["phase"] = phase
    if reclaim is not None:
        status["reclaim"] = reclaim
    if end is not None:
        status["end"] = format_time(end)
    spec: dict[str, Any] = {
        "tenant": "alpha",
        "podRef": {"namespace": "ns", "name": "p", "uid": "uid-p"},
        "node": "n1",
        "borrowed": 5,  # evicted leases are borrowed: only those can be reclaimed
        "devices": [{"uuid": "GPU-0", "index": 0, "model": "A100-80GB", "offsetBytes": 0,
                     "sizeBytes": 12 * 2**30}],
    }  # fmt: skip
    if expiry is not None:
        spec["expiry"] = format_time(expiry)
    return lease_from_json({"metadata": {"name": "uid-p", "namespace": "ns"}, "spec": spec,
                       "status": status})  # fmt: skip


def pod(phase: str, node: str | None = "n1", *, deleting_since: float | None = None) -> Any:
    meta: dict[str, Any] = {"name": "p", "namespace": "ns", "uid": "uid-p",
                            "labels": {"gpupool.io/tenant": "alpha"}}  # fmt: skip
    if deleting_since is not None:
        meta["deletionTimestamp"] = format_time(deleting_since)
    return read_pod(
        {"metadata": meta, "spec": {"nodeName": node, "containers": []}, "status": {"phase": phase}}
    )


def test_a_finished_pod_releases_its_lease_with_gib_hours() -> None:
    plan = plan_leases([lease("Active")], {"uid-p": pod("Succeeded")}, T0 + 1800)
    (move,) = plan.moves
    assert (phase_name(move.phase), move.reason) == ("Released", "PodCompleted")
    assert move.gib_hours == 6.0  # 12 GiB for half an hour


def test_a_lease_whose_pod_is_not_seen_is_released_only_once_confirmed_gone() -> None:
    unsure = plan_leases([lease("Bound")], {}, T0 + 3600)
    assert unsure.moves == () and len(unsure.unsure) == 1
    gone = plan_leases([lease("Bound")], {}, T0 + 3600, known_gone=frozenset({"uid-p"}))
    assert gone.moves[0].reason == "PodGone" and gone.moves[0].gib_hours == 12.0


def test_phases_follow_the_pod() -> None:
    assert (
        phase_name(plan_leases([lease()], {"uid-p": pod("Pending")}, T0).moves[0].phase) == "Bound"
    )
    assert (
        phase_name(plan_leases([lease("Bound")], {"uid-p": pod("Running")}, T0).moves[0].phase)
        == "Active"
    )
    assert plan_leases([lease("Active")], {"uid-p": pod("Running")}, T0).moves == ()


def test_expiry_and_collection() -> None:
    # Past its expiry while its pod runs, the lease holds its card: the pod gets a notice and
    # its grace period first (`leases.expiry`); once the pod is gone it ends Expired, metered
    # to then, since the card was held that long.
    due = lease("Active", expiry=T0 + 60)
    assert plan_leases([due], {"uid-p": pod("Running")}, T0 + 600).moves == ()
    expired = plan_leases([due], {}, T0 + 1800, known_gone=frozenset({"uid-p"}))
    (move,) = expired.moves
    assert (phase_name(move.phase), move.reason) == ("Expired", "Expired")
    assert move.to.ended_at == T0 + 1800 and move.gib_hours == 6.0
    finished = plan_leases([due], {"uid-p": pod("Failed")}, T0 + 900).moves[0]
    assert phase_name(finished.phase) == "Expired" and finished.to.ended_at == T0 + 900
    ended = lease("Released", end=T0 + 10)
    assert plan_leases([ended], {}, T0 + 100, retention_s=3600).collect == ()
    assert len(plan_leases([ended], {}, T0 + 3611, retention_s=3600).collect) == 1


def test_a_reservation_whose_pod_stays_unbound_is_swept_after_the_timeout() -> None:
    """A bind that never reached its Binding leaves a Reserved lease for a pod bound nowhere: it
    would hold its card for as long as the pod lives."""
    waiting = {"uid-p": pod("Pending", node=None)}
    early = plan_leases([lease()], waiting, T0 + 119, reserved_timeout_s=120)
    assert early.sweep == () and early.moves == ()
    late = plan_leases([lease()], waiting, T0 + 120, reserved_timeout_s=120)
    assert [x.key for x in late.sweep] == ["ns/uid-p"] and late.moves == ()
    assert plan_leases([lease()], waiting, T0 + 10**6, reserved_timeout_s=None).sweep == ()


def test_only_a_reserved_lease_of_a_live_unbound_pod_is_swept() -> None:
    late = T0 + 3600
    bound = plan_leases([lease()], {"uid-p": pod("Pending")}, late, reserved_timeout_s=120)
    assert bound.sweep == () and phase_name(bound.moves[0].phase) == "Bound"
    # Bound or Active: the pod was placed on it; the pod's own fate decides
    for phase in ("Bound", "Active"):
        held = plan_leases([lease(phase)], {"uid-p": pod("Pending", node=None)}, late)
        assert held.sweep == ()
    # the pod gone: released and metered through `unsure`, not swept
    gone = plan_leases([lease()], {}, late, reserved_timeout_s=120)
    assert gone.sweep == () and len(gone.unsure) == 1
    # the pod being deleted keeps its lease until it is gone
    deleting = read_pod(
        {
            "metadata": {"name": "p", "namespace": "ns", "uid": "uid-p",
                         "deletionTimestamp": format_time(late),
                         "labels": {"gpupool.io/tenant": "alpha"}},
            "spec": {"containers": []},
            "status": {"phase": "Pending"},
        }
    )  # fmt: skip
    assert deleting.deleting
    assert plan_leases([lease()], {"uid-p": deleting}, late, reserved_timeout_s=120).sweep == ()


def _evicted_at(at: float) -> dict[str, Any]:
    return {"at": format_time(at), "reason": "QuotaReclaim", "message": EVICTED}


def test_a_lease_whose_pod_reclaim_evicted_ends_reclaimed_once_the_pod_is_gone() -> None:
    evicted = lease("Active", reclaim=_evicted_at(T0 + 1700))
    assert evicted.reclaim is not None and evicted.reclaim.reason == "QuotaReclaim"
    unsure = plan_leases([evicted], {}, T0 + 1800)
    assert unsure.moves == () and unsure.unsure == (evicted,)  # looked up first, as any lease
    plan = plan_leases([evicted], {}, T0 + 1800, known_gone=frozenset({"uid-p"}))
    (move,) = plan.moves
    assert (phase_name(move.phase), move.reason) == ("Reclaimed", "Evicted")
    assert "pod ns/p (uid-p) is gone" in move.message and EVICTED in move.message
    assert format_time(T0 + 1700) in move.message
    assert (
        move.to.ended_at == T0 + 1800 and move.gib_hours == 6.0
    )  # metered as a release: 12 GiB, 30 min


def test_a_lease_whose_pod_reclaim_evicted_ends_reclaimed_when_the_pod_finishes() -> None:
    evicted = lease("Active", reclaim=_evicted_at(T0 + 1700))
    (move,) = plan_leases([evicted], {"uid-p": pod("Failed")}, T0 + 3600).moves
    assert (phase_name(move.phase), move.reason, move.gib_hours) == ("Reclaimed", "Evicted", 12.0)


def test_an_evicted_pod_still_terminating_keeps_its_lease_live() -> None:
    """Its container may still hold the card's memory through its termination grace period."""
    evicted = lease("Active", reclaim=_evicted_at(T0 + 1700))
    terminating = pod("Running", deleting_since=T0 + 1700)
    assert terminating.deleting
    plan = plan_leases([evicted], {"uid-p": terminating}, T0 + 1800)
    assert plan.moves == () and plan.unsure == () and plan.collect == ()


def test_without_a_reclaim_record_the_lease_is_released() -> None:
    for bad in (None, {"reason": "QuotaReclaim"}, {"at": "not a time"}, "evicted"):
        plain = lease("Active", reclaim=bad)  # type: ignore[arg-type]
        assert plain.reclaim is None, bad
        (move,) = plan_leases([plain], {}, T0 + 1800, known_gone=frozenset({"uid-p"})).moves
        assert (phase_name(move.phase), move.reason, move.gib_hours) == ("Released", "PodGone", 6.0)


def test_a_reclaimed_lease_is_ended_and_collected_like_a_released_one() -> None:
    ended = lease("Reclaimed", end=T0 + 10, reclaim=_evicted_at(T0 + 5))
    assert plan_leases([ended], {}, T0 + 100).moves == ()
    assert len(plan_leases([ended], {}, T0 + 3611, retention_s=3600).collect) == 1


def test_a_reserved_lease_whose_pod_already_runs_goes_through_bound() -> None:
    """The core has no Reserved -> Active; the one way there is through Bound, both steps in one
    move (the status then records boundAt and activeAt)."""
    assert LeasePhase.ACTIVE not in ALLOWED[LeasePhase.RESERVED]
    (move,) = plan_leases([lease()], {"uid-p": pod("Running")}, T0 + 5).moves
    assert isinstance(move, Move) and move.phase is LeasePhase.ACTIVE
    assert (move.to.bound_at, move.to.active_at) == (T0 + 5, T0 + 5)
    assert move.gib_hours is None  # still held: metered when it ends


def test_a_reclaim_mark_on_a_lease_that_is_not_borrowed_ends_it_released() -> None:
    """The core reclaims only borrowed or preemptible leases; a mark on any other is released
    (and says why), never a transition the lifecycle forbids."""
    evicted = lease("Active", reclaim=_evicted_at(T0 + 1700))
    plain = replace(evicted, borrowed=0)
    (move,) = plan_leases([plain], {"uid-p": pod("Succeeded")}, T0 + 1800).moves
    assert phase_name(move.phase) == "Released" and "borrowed or preemptible" in move.message


def test_a_claim_pods_reservation_is_never_swept() -> None:
    """Its ResourceClaim stays allocated to the card: kube-scheduler binds it there however late,
    so the lease keeps those bytes counted until the pod is gone."""
    waiting = replace(pod("Pending", node=None), claim_pod=True)
    plan = plan_leases([lease()], {"uid-p": waiting}, T0 + 10**6, reserved_timeout_s=120)
    assert plan.sweep == () and plan.moves == ()
