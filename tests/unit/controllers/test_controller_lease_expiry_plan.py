"""Lease expiry and renewal, the pure plan: for a clock and some leases, which get their expiry,
which are renewed, which pods get an expiry notice and which are evicted."""

from __future__ import annotations

from typing import Any

from fake_cluster import lease_json, pod_json

from gpupool.adapters.kubernetes.lease import lease_from_json
from gpupool.adapters.kubernetes.pod_view import read_pod
from gpupool.adapters.wire.reclaim_notice import notice_annotation
from gpupool.adapters.wire.times import format_time
from gpupool.controllers.leases.expiry import ExpiryPlan, plan_expiry
from gpupool.state.lease_terms import TenantLeaseTerms
from gpupool.state.notice import ReclaimNotice

T0 = 1_767_225_600.0
TENANTS = {"alpha": TenantLeaseTerms(default_ttl_s=None, grace_s=5.0)}


def _pod(name: str, **annotations: str) -> Any:
    notes = {f"gpupool.io/{k.replace('_', '-')}": v for k, v in annotations.items()}
    return pod_json(name, "alpha", node="n1", phase="Running", annotations=notes)


def _lease(pod: Any, *, expiry: float | None = None, ttl: float | None = None,
           renewal: str | None = None, phase: str = "Active") -> Any:  # fmt: skip
    obj = lease_json(pod, phase=phase, start=T0)
    if expiry is not None:
        obj["spec"]["expiry"] = format_time(expiry)
    if ttl is not None:
        obj["spec"]["ttlSeconds"] = ttl
    if renewal is not None:
        obj["spec"]["renewal"] = renewal
    return lease_from_json(obj)


def _plan(pairs: list[tuple[Any, Any]], now: float, tenants: Any = None) -> ExpiryPlan:
    leases = [lease for _, lease in pairs]
    pods = {read_pod(p).uid: read_pod(p) for p, _ in pairs}
    return plan_expiry(leases, pods, TENANTS if tenants is None else tenants, now)


def test_a_lease_gets_its_expiry_from_its_pods_ttl_else_its_tenants_default() -> None:
    own = _pod("own", lease_ttl="20s")
    default = _pod("default")
    plan = _plan([(own, _lease(own)), (default, _lease(default))], T0 + 1)
    assert [(t.lease.pod.name, t.ttl_s, t.expiry) for t in plan.terms] == [("own", 20.0, T0 + 20)]
    tenants = {"alpha": TenantLeaseTerms(default_ttl_s=3600.0)}
    plan = _plan([(own, _lease(own)), (default, _lease(default))], T0 + 1, tenants)
    assert [(t.lease.pod.name, t.ttl_s) for t in plan.terms] == [("own", 20.0), ("default", 3600)]
    assert plan.notices == () and plan.evictions == ()


def test_a_new_renewal_value_before_the_expiry_renews_for_the_ttl() -> None:
    pod = _pod("p", lease_ttl="20s", renew="2")
    lease = _lease(pod, expiry=T0 + 20, ttl=20, renewal="1")
    (renewed,) = _plan([(pod, lease)], T0 + 15).terms
    assert (renewed.expiry, renewed.renewal) == (T0 + 35, "2")
    same = _lease(pod, expiry=T0 + 20, ttl=20, renewal="2")  # already honoured: nothing to do
    assert _plan([(pod, same)], T0 + 15) == ExpiryPlan()


def test_an_unrenewed_expired_lease_gets_a_notice_then_its_pod_is_evicted_after_the_grace() -> None:
    pod = _pod("p", lease_ttl="20s")
    lease = _lease(pod, expiry=T0 + 20, ttl=20)
    assert _plan([(pod, lease)], T0 + 19) == ExpiryPlan()  # not yet
    (notice,) = _plan([(pod, lease)], T0 + 21).notices
    assert (notice.notice.at, notice.notice.evict_at) == (T0 + 21, T0 + 26)  # 5 s grace
    assert "expired at" in notice.message and "gpupool.io/renew" in notice.message
    noticed = _pod("p", lease_ttl="20s", expiry_notice=notice_annotation(notice.notice))
    assert _plan([(noticed, lease)], T0 + 25) == ExpiryPlan()  # in its grace period
    (eviction,) = _plan([(noticed, lease)], T0 + 26).evictions
    assert eviction.pod.key == "ns/p" and "was not renewed" in eviction.message


def test_a_renewal_after_the_expiry_is_too_late() -> None:
    pod = _pod("p", lease_ttl="20s", renew="late")
    plan = _plan([(pod, _lease(pod, expiry=T0 + 20, ttl=20))], T0 + 30)
    assert plan.terms == () and len(plan.notices) == 1


def test_only_the_unrenewed_of_two_leases_is_noticed() -> None:
    kept = _pod("kept", lease_ttl="20s", renew="1")
    left = _pod("left", lease_ttl="20s")
    pairs = [
        (kept, _lease(kept, expiry=T0 + 20, ttl=20)),
        (left, _lease(left, expiry=T0 + 20, ttl=20)),
    ]
    renewed = _plan(pairs, T0 + 10)
    assert [t.lease.pod.name for t in renewed.terms] == ["kept"] and renewed.notices == ()
    kept_lease = _lease(kept, expiry=T0 + 30, ttl=20, renewal="1")
    later = _plan([(kept, kept_lease), pairs[1]], T0 + 21)
    assert [n.pod.name for n in later.notices] == ["left"] and later.terms == ()


def test_a_lease_seen_first_after_its_expiry_is_noticed_at_once() -> None:
    pod = _pod("p", lease_ttl="20s")
    plan = _plan([(pod, _lease(pod))], T0 + 60)  # the controller was down meanwhile
    assert [t.expiry for t in plan.terms] == [T0 + 20] and len(plan.notices) == 1


def test_no_notice_for_a_finished_or_deleting_pod_or_an_ended_lease() -> None:
    done = pod_json("done", "alpha", node="n1", phase="Succeeded",
                    annotations={"gpupool.io/lease-ttl": "20s"})  # fmt: skip
    going = _pod("going", lease_ttl="20s")
    going["metadata"]["deletionTimestamp"] = format_time(T0 + 21)
    ended = _pod("ended", lease_ttl="20s")
    pairs = [
        (done, _lease(done, expiry=T0 + 20, ttl=20)),
        (going, _lease(going, expiry=T0 + 20, ttl=20)),
        (ended, _lease(ended, expiry=T0 + 20, ttl=20, phase="Released")),
    ]
    assert _plan(pairs, T0 + 30) == ExpiryPlan()


def test_a_blocked_eviction_is_planned_again() -> None:
    notice = ReclaimNotice(T0 + 21, T0 + 26, "alpha", "ns/p", blocked="PDB")
    pod = _pod("p", lease_ttl="20s", expiry_notice=notice_annotation(notice))
    (eviction,) = _plan([(pod, _lease(pod, expiry=T0 + 20, ttl=20))], T0 + 40).evictions
    assert eviction.notice.blocked == "PDB"
