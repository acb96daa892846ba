"""Gangs in the admission queue's plan: a gang waits until all its members exist, then all its
gated members are admitted in one round or none; bad gangs are told why on every member; a
borrowing gang is reclaimed as one victim."""

from __future__ import annotations

from typing import Any

from test_controller_admission_plan import at, decide, names, pod_json

from gpupool.adapters.kubernetes.pod_view import read_pod
from gpupool.adapters.wire.admitted import Admitted, admitted_annotation
from gpupool.controllers.reclaim.plan import plan_reclaim_round
from gpupool.domain.units import GiB
from gpupool.quota.queue import FifoMode
from gpupool.quota.spec import TenantQuota
from gpupool.state.pods import PodView


def member(name: str, gang: str = "train", size: int = 4, **kw: Any) -> PodView:
    pod = pod_json(name, **kw)
    pod["metadata"]["labels"]["gpupool.io/gang"] = gang
    pod["metadata"]["annotations"]["gpupool.io/gang-size"] = str(size)
    return read_pod(pod)


def running(name: str, **kw: Any) -> dict[str, Any]:
    return {"gated": False, "admitted": admitted_annotation(Admitted(0.0), "x"), **kw}


def test_a_gang_waits_until_all_its_members_exist_without_holding_anyone_back() -> None:
    quota = TenantQuota("alpha", nominal=96 * GiB)
    pods = [member(f"w-{i}", memory="16Gi", queued_at=at(i)) for i in range(3)]
    pods.append(read_pod(pod_json("solo", queued_at=at(9))))
    plan = decide(pods, [quota], now=10.0, mode=FifoMode.STRICT)
    assert names(plan.admit) == ["solo"]  # even strict FIFO: an incomplete gang blocks nobody
    assert {q.pod.name for q in plan.queued} == {"w-0", "w-1", "w-2"}
    assert {q.reason for q in plan.queued} == {"GANG_INCOMPLETE"}
    assert plan.queued[0].note == (
        "position 1 of 1 in the queue of tenant alpha: gang 'ns/train': 3 of 4 members created; "
        "it is admitted once all 4 exist"
    )


def test_the_complete_gang_is_admitted_in_one_round() -> None:
    quota = TenantQuota("alpha", nominal=64 * GiB)
    pods = [member(f"w-{i}", memory="16Gi", queued_at=at(i)) for i in range(4)]
    plan = decide(pods, [quota], now=10.0)
    assert sorted(names(plan.admit)) == ["w-0", "w-1", "w-2", "w-3"]
    assert plan.ledger.used("alpha") == 64 * GiB
    assert {le.gang for le in plan.ledger} == {"ns/train"}


def test_a_gang_of_four_where_three_fit_waits_whole_with_the_gangs_reason() -> None:
    quota = TenantQuota("alpha", nominal=64 * GiB)
    pods = [read_pod(pod_json("other", memory="16Gi", **running("other")))]
    pods += [member(f"w-{i}", memory="16Gi", queued_at=at(i)) for i in range(4)]
    plan = decide(pods, [quota], now=10.0)
    assert plan.admit == ()
    assert len(plan.queued) == 4 and {q.reason for q in plan.queued} == {"NO_COHORT"}
    assert plan.queued[0].detail.startswith(
        "gang 'ns/train' needs 64Gi for its 4 waiting members; tenant 'alpha''s quota has room "
        "for 3 of them now (48Gi): "
    )
    # the other pod ends: all four go together
    done = pod_json("other", memory="16Gi", **running("other"), phase="Succeeded")
    plan = decide([read_pod(done), *pods[1:]], [quota], now=20.0)
    assert len(plan.admit) == 4


def test_a_replacement_joins_the_admitted_members_and_is_admitted_alone() -> None:
    quota = TenantQuota("alpha", nominal=64 * GiB)
    pods = [member(f"w-{i}", memory="16Gi", **running(f"w-{i}")) for i in range(3)]
    failed = member("w-3", memory="16Gi", **running("w-3"), phase="Failed")
    plan = decide([*pods, failed, member("w-4", memory="16Gi")], [quota], now=10.0)
    assert names(plan.admit) == ["w-4"]


def test_members_that_disagree_or_overflow_are_never_admitted_and_told_why() -> None:
    quota = TenantQuota("alpha", nominal=640 * GiB)
    pods = [member("w-0", size=2), member("w-1", size=3)]
    plan = decide(pods, [quota], now=10.0)
    assert plan.admit == ()
    assert {q.reason for q in plan.queued} == {"GANG_CONFLICT"}
    assert "disagree on the gang's size (2, 3)" in plan.queued[0].detail
    over = [member(f"w-{i}", size=2) for i in range(3)]
    plan = decide(over, [quota], now=10.0)
    assert plan.admit == () and "has 3 live members but its size is 2" in plan.queued[0].detail


def test_a_gang_too_big_for_its_quota_is_not_admittable() -> None:
    quota = TenantQuota("alpha", nominal=32 * GiB)
    pods = [member(f"w-{i}", size=3, memory="16Gi") for i in range(3)]
    plan = decide(pods, [quota], now=10.0)
    assert {q.reason for q in plan.queued} == {"REJECTED"}
    assert plan.queued[0].detail.startswith("can never be admitted: gang 'ns/train' (3 members)")


def test_a_borrowing_gang_is_noticed_whole_for_a_lender() -> None:
    quotas = [
        TenantQuota("alpha", nominal=32 * GiB, cohort="c"),
        TenantQuota("beta", nominal=32 * GiB, cohort="c"),
    ]
    borrowed = admitted_annotation(Admitted(0.0, borrowed=16 * GiB), "x")
    plain = admitted_annotation(Admitted(0.0), "x")
    gang = [
        member(f"w-{i}", size=3, memory="16Gi", gated=False,
               admitted=borrowed if i == 2 else plain)
        for i in range(3)
    ]  # fmt: skip
    views = [*gang, read_pod(pod_json("b", tenant="beta", memory="32Gi"))]
    plan = decide(views, quotas, now=10.0)
    assert [a.tenant for a in plan.reclaim] == ["beta"]
    round_ = plan_reclaim_round(plan, views, 10.0)
    assert sorted(n.pod.name for n in round_.notices) == ["w-0", "w-1", "w-2"]
    assert (
        "gang ns/train runs on borrowed quota and is reclaimed whole" in round_.notices[0].message
    )
