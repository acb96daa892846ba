"""The admission round's steps (`admission.plan`), each over an explicit `RoundState`:
open_round (quotas and the ledger), fill_queue (entries, a gang as one), ask_of, record_admit,
no_quota, attempt, gang_not_ready, attempt_gang, queue_positions and tenant_statuses."""

from __future__ import annotations

from functools import partial
from typing import Any

from test_controller_admission_plan import at, pod_json
from test_controller_gang_admission import member

from gpupool.adapters.kubernetes.pod_view import read_pod
from gpupool.adapters.wire.admitted import Admitted, admitted_annotation
from gpupool.adapters.wire.names import DEFAULT_TENANT
from gpupool.controllers.admission.plan import (
    GANG_ENTRY,
    RoundState,
    ask_of,
    attempt,
    attempt_gang,
    fill_queue,
    gang_not_ready,
    no_quota,
    open_round,
    queue_positions,
    record_admit,
    tenant_statuses,
)
from gpupool.domain.units import GiB
from gpupool.quota.admission import Admit, WaitReason
from gpupool.quota.queue import FifoMode, QueueEntry
from gpupool.quota.spec import TenantQuota
from gpupool.state.pods import PodView

NOW = 10.0


def running(name: str, **kw: Any) -> PodView:
    return read_pod(
        pod_json(name, gated=False, admitted=admitted_annotation(Admitted(0.0), "x"), **kw)
    )


def gated(name: str, **kw: Any) -> PodView:
    return read_pod(pod_json(name, **kw))


def state_of(pods: list[PodView], quotas: list[TenantQuota], **kw: Any) -> RoundState:
    return open_round(pods, quotas, NOW, DEFAULT_TENANT, None, kw.get("problems", {}), {})


def test_open_round_charges_the_admitted_pods_and_adds_the_unlimited_default() -> None:
    pods = [running("r1", memory="16Gi"), gated("g1")]
    state = state_of(pods, [TenantQuota("alpha", nominal=64 * GiB)])
    assert state.ledger.used("alpha") == 16 * GiB  # the gated pod holds nothing yet
    assert state.unlimited == DEFAULT_TENANT and state.book.get(DEFAULT_TENANT) is not None


def test_quotas_that_clash_admit_nothing_and_every_tenant_says_why() -> None:
    twice = [TenantQuota("alpha", nominal=GiB), TenantQuota("alpha", nominal=2 * GiB)]
    state = state_of([], twice)
    assert state.book.get("alpha") is None
    assert state.problems == {"alpha": "tenant 'alpha' has two quotas; keep one"}


def test_fill_queue_admits_a_pod_without_gpus_and_makes_a_gang_one_entry() -> None:
    no_gpu = pod_json("cpu", queued_at=at(0))
    no_gpu["spec"]["containers"][0]["resources"] = {}
    pods = [read_pod(no_gpu), gated("solo", queued_at=at(1))]
    pods += [member(f"w-{i}", size=2, queued_at=at(2 + i)) for i in range(2)]
    state = state_of(pods, [TenantQuota("alpha", nominal=64 * GiB)])
    queue = fill_queue(state, pods, FifoMode.BEST_EFFORT)
    assert [a.pod.name for a in state.admit] == ["cpu"]
    assert sorted(state.members) == [GANG_ENTRY + "ns/train", "ns/solo"]
    assert [p.name for p in state.members[GANG_ENTRY + "ns/train"]] == ["w-0", "w-1"]
    assert len(queue) == 2 and len(state.live_members["ns/train"]) == 2


def test_ask_of_counts_the_request_in_the_quotas_resource() -> None:
    quota = TenantQuota("alpha", nominal=64 * GiB)
    pod = gated("g1", memory="12Gi")
    state = state_of([pod], [quota])
    assert ask_of(state, pod, quota).amount == 12 * GiB


def test_record_admit_says_when_the_tenant_is_not_limited() -> None:
    pod = gated("g1", tenant=DEFAULT_TENANT)
    state = state_of([pod], [])
    quota = state.book.get(DEFAULT_TENANT)
    assert quota is not None
    ask = ask_of(state, pod, quota)
    lease = record_admit(state, pod, quota, Admit(DEFAULT_TENANT, ask.amount, 0, False, "x"), ask)
    [admitted] = state.admit
    assert "has no GpuQuota, so it is not limited" in admitted.reason
    assert lease.reserved_at == NOW and lease.amount == ask.amount and not lease.borrowed


def test_no_quota_tells_the_user_to_ask_for_one_or_gives_the_quotas_problem() -> None:
    state = state_of([], [], problems={"beta": "GpuQuota beta: nominal is not a quantity"})
    out = no_quota(state, "ns/x", "gamma")
    assert not out.admitted and "ask an administrator to create GpuQuota 'gamma'" in out.detail
    assert state.stuck["ns/x"][0] == "NO_QUOTA"
    assert no_quota(state, "ns/y", "beta").detail == "GpuQuota beta: nominal is not a quantity"


def test_attempt_admits_into_the_ledger_or_asks_for_reclaim() -> None:
    quotas = [
        TenantQuota("alpha", nominal=16 * GiB, cohort="c"),
        TenantQuota("beta", nominal=16 * GiB, cohort="c"),
    ]
    borrower = read_pod(
        pod_json(
            "b1",
            tenant="beta",
            memory="32Gi",
            gated=False,
            admitted=admitted_annotation(Admitted(0.0, borrowed=16 * GiB), "x"),
        )
    )
    pods = [borrower, gated("a1", memory="12Gi")]
    state = state_of(pods, quotas)
    fill_queue(state, pods, FifoMode.BEST_EFFORT)
    entry = QueueEntry("ns/a1", "alpha", 0, 0.0)
    out = attempt(state, entry)
    assert not out.admitted and out.reason is WaitReason.RECLAIM_NEEDED
    assert [(r.tenant, r.needed) for r in state.reclaim] == [("alpha", 12 * GiB)]
    roomy = state_of(pods[1:], quotas)
    fill_queue(roomy, pods[1:], FifoMode.BEST_EFFORT)
    assert attempt(roomy, entry).admitted and roomy.ledger.used("alpha") == 12 * GiB


def test_gang_not_ready_while_members_are_missing_then_ready() -> None:
    quota = TenantQuota("alpha", nominal=64 * GiB)
    three = [member(f"w-{i}", size=4, queued_at=at(i)) for i in range(3)]
    state = state_of(three, [quota])
    fill_queue(state, three, FifoMode.BEST_EFFORT)
    out = gang_not_ready(state, GANG_ENTRY + "ns/train", three)
    assert out is not None and out.reason is WaitReason.GANG_INCOMPLETE and not out.holds_line
    four = [*three, member("w-3", size=4, queued_at=at(3))]
    state = state_of(four, [quota])
    fill_queue(state, four, FifoMode.BEST_EFFORT)
    assert gang_not_ready(state, GANG_ENTRY + "ns/train", four) is None


def test_gang_not_ready_when_members_disagree_on_the_size() -> None:
    pods = [member("w-0", size=2), member("w-1", size=3)]
    state = state_of(pods, [TenantQuota("alpha", nominal=64 * GiB)])
    fill_queue(state, pods, FifoMode.BEST_EFFORT)
    out = gang_not_ready(state, GANG_ENTRY + "ns/train", pods)
    assert out is not None and "disagree on the gang's size (2, 3)" in out.detail
    assert state.stuck[GANG_ENTRY + "ns/train"][0] == "GANG_CONFLICT"


def test_attempt_gang_admits_every_member_or_none() -> None:
    pods = [member(f"w-{i}", size=2, memory="16Gi") for i in range(2)]
    fits = state_of(pods, [TenantQuota("alpha", nominal=32 * GiB)])
    fill_queue(fits, pods, FifoMode.BEST_EFFORT)
    assert attempt_gang(fits, GANG_ENTRY + "ns/train", pods).admitted
    assert sorted(a.pod.name for a in fits.admit) == ["w-0", "w-1"]
    assert fits.ledger.used("alpha") == 32 * GiB
    short = state_of(pods, [TenantQuota("alpha", nominal=24 * GiB)])
    fill_queue(short, pods, FifoMode.BEST_EFFORT)
    assert not attempt_gang(short, GANG_ENTRY + "ns/train", pods).admitted
    assert short.admit == [] and short.ledger.used("alpha") == 0


def test_queue_positions_and_tenant_statuses_show_each_line() -> None:
    quota = TenantQuota("alpha", nominal=12 * GiB)
    pods = [gated(f"g{i}", memory="12Gi", queued_at=at(i)) for i in range(3)]
    state = state_of(pods, [quota])
    queue = fill_queue(state, pods, FifoMode.BEST_EFFORT)
    queue.drain(partial(attempt, state))
    per_tenant = queue_positions(queue, state)
    assert [(q.pod.name, q.position, q.queued) for q in per_tenant["alpha"]] == [
        ("g1", 1, 2),
        ("g2", 2, 2),
    ]
    statuses = {t.tenant: t for t in tenant_statuses(state.book, state.ledger, per_tenant)}
    assert statuses["alpha"].used == 12 * GiB and len(statuses["alpha"].queue) == 2
    assert statuses[DEFAULT_TENANT].queue == ()


def test_open_round_keeps_a_pods_charge_while_its_view_quota_and_card_sizes_are_the_same() -> None:
    from dataclasses import replace

    from gpupool.controllers.admission.charge import KeptCharges
    from gpupool.quota.lease import Lease

    pods = [running("r1", memory="16Gi"), running("r2", memory="8Gi")]
    quota, sizes = TenantQuota("alpha", nominal=64 * GiB), {"A100-80GB": 80 * GiB}
    charged = KeptCharges()

    def ledger_of(these: list[PodView], q: TenantQuota, s: dict[str, int]) -> dict[str, Lease]:
        state = open_round(these, [q], NOW, DEFAULT_TENANT, None, {}, s, charged)
        charged.pass_done()
        fresh = open_round(these, [q], NOW, DEFAULT_TENANT, None, {}, s)
        leases = {x.id: x for x in state.ledger}
        assert leases == {x.id: x for x in fresh.ledger}  # as made afresh
        return leases

    first = ledger_of(pods, quota, sizes)
    again = ledger_of(pods, quota, sizes)
    assert all(again[k] is first[k] for k in first)  # kept: not made again
    bigger = [replace(pods[0], priority=5), pods[1]]  # a new view of r1: charged again
    moved = ledger_of(bigger, quota, sizes)
    assert moved[pods[0].uid or pods[0].key].priority == 5
    assert moved[pods[1].uid or pods[1].key] is first[pods[1].uid or pods[1].key]
    other = ledger_of(bigger, replace(quota, nominal=32 * GiB), sizes)  # a new quota object
    assert all(other[k] is not moved[k] for k in moved)
    settled = ledger_of(bigger, quota, sizes)
    assert all(ledger_of(bigger, quota, sizes)[k] is settled[k] for k in settled)
    assert all(ledger_of(bigger, quota, dict(sizes))[k] is not settled[k] for k in settled)
