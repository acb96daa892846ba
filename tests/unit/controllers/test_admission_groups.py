"""Admission decided per group of tenants (`admission.groups`): the groups (a cohort together, a
gang's tenants together), and seeded random histories in which the plan made group by group,
groups kept between rounds while they stand, equals one plan over every tenant after every step."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

from test_controller_admission_plan import pod_json

from gpupool.adapters.kubernetes.pod_view import read_pod
from gpupool.adapters.wire.admitted import Admitted, admitted_annotation
from gpupool.adapters.wire.names import DEFAULT_TENANT
from gpupool.controllers.admission.groups import GroupPlans, tenant_groups
from gpupool.controllers.admission.plan import AdmissionPlan, plan_admission
from gpupool.domain.units import GiB
from gpupool.quota.book import QuotaBook
from gpupool.quota.lease import Lease
from gpupool.quota.metering import Meter
from gpupool.quota.queue import FifoMode
from gpupool.quota.spec import Budget, TenantQuota
from gpupool.rfc3339 import format_time
from gpupool.state.pods import PodView

QUOTAS = (
    TenantQuota("alpha", nominal=32 * GiB, cohort="c1"),
    TenantQuota("beta", nominal=16 * GiB, cohort="c1", lend_limit=8 * GiB),
    TenantQuota("gamma", nominal=24 * GiB, cohort="c2", borrow_limit=8 * GiB),
    TenantQuota("delta", nominal=24 * GiB, cohort="c2"),
    # a budget spent in a few minutes and renewed every 10: time alone moves its verdicts
    TenantQuota("eps", nominal=40 * GiB, budget=Budget(limit=0.5, window_s=600.0)),
    TenantQuota("zeta", nominal=8 * GiB, max_pods=2),
)
TENANTS = [q.name for q in QUOTAS] + [DEFAULT_TENANT, "nobody"]  # `nobody` has no GpuQuota


def view(name: str, **kw: Any) -> PodView:
    gang = kw.pop("gang", None)
    pod = pod_json(name, **kw)
    if gang is not None:
        pod["metadata"]["labels"]["gpupool.io/gang"] = gang
        pod["metadata"]["annotations"]["gpupool.io/gang-size"] = "2"
    return read_pod(pod)


def test_a_cohort_and_the_tenants_of_one_gang_are_one_group_every_other_tenant_alone() -> None:
    pods = [view("a", tenant="eps", gang="g"), view("b", tenant="zeta", gang="g")]
    groups = tenant_groups(TENANTS, QUOTAS, pods)
    assert groups == [
        ("alpha", "beta"),
        (DEFAULT_TENANT,),
        ("delta", "gamma"),
        ("eps", "zeta"),
        ("nobody",),
    ]
    assert ("eps",) in tenant_groups(TENANTS, QUOTAS, pods[:1])  # one member: no bond


def _whole(
    pods: list[PodView], quotas: list[TenantQuota], now: float, meter: Meter
) -> AdmissionPlan:
    return plan_admission(
        pods, quotas, now, default_tenant=DEFAULT_TENANT, mode=FifoMode.BEST_EFFORT, meter=meter
    )


def _said(plan: AdmissionPlan) -> dict[str, Any]:
    """What a plan decides, in a form that does not depend on the order groups come in."""
    ledger = plan.ledger
    book = sorted(q.name for q in ledger.book)
    return {
        "admit": sorted(
            (a.pod.key, a.borrowed, a.preemptible, a.reason, a.amount) for a in plan.admit
        ),
        "queued": sorted(
            (q.pod.key, q.position, q.queued, q.reason, q.detail) for q in plan.queued
        ),
        "tenants": sorted(plan.tenants, key=lambda s: s.tenant),
        "reclaim": sorted((r.tenant, r.needed, r.pod.key) for r in plan.reclaim),
        "book": book,
        "accounts": {t: _account(plan, t) for t in book},
        "pools": {c: ledger.pool_used(c) for c in ledger.book.cohorts()},
        "leases": len(ledger),
        "problems": dict(plan.quota_problems),
    }


def _account(plan: AdmissionPlan, tenant: str) -> tuple[int, int, int, int, list[str]]:
    ledger = plan.ledger
    leases = sorted(x.id for x in ledger.leases(tenant))
    return (ledger.used(tenant), ledger.borrowed(tenant), ledger.lent(tenant),
            ledger.pods(tenant), leases)  # fmt: skip


def _admitted(pod: PodView, plan: AdmissionPlan, now: float) -> PodView:
    admit = next(a for a in plan.admit if a.pod.key == pod.key)
    record = Admitted(now, admit.borrowed, admit.preemptible, admit.resource, admit.amount)
    return _remade(pod, gated=False, admitted=admitted_annotation(record, admit.reason))


def _remade(pod: PodView, **kw: Any) -> PodView:
    spec = pod.request
    memory = f"{(spec.gpu_memory_bytes or GiB) // GiB}Gi" if spec is not None else "1Gi"
    args: dict[str, Any] = {
        "tenant": pod.tenant,
        "memory": memory,
        "priority": pod.priority,
        "queued_at": format_time(pod.submitted_at),
        "gated": pod.gated,
    }
    if pod.admitted is not None:
        args["admitted"] = admitted_annotation(pod.admitted, "x")
    if pod.gang is not None:
        args["gang"] = pod.gang.name
    return view(pod.name, **(args | kw))


def test_plans_made_per_group_or_kept_while_standing_equal_one_plan_over_every_tenant() -> None:
    for seed in range(12):
        rng = random.Random(seed)
        quotas = list(QUOTAS)
        pods: dict[str, PodView] = {}
        groups = GroupPlans()
        now = 1000.0
        kept = waiting = 0
        held: list[Lease] = []  # what the last round's ledger held: metered up to now
        for step in range(70):
            now += rng.choice((0.0, 1.0, 30.0))
            roll = rng.random()
            if roll < 0.4:  # a new gated pod
                name = f"p{step}"
                extra: dict[str, Any] = {}
                if rng.random() < 0.15:
                    extra["gang"] = rng.choice(("g1", "g2"))
                pods[name] = view(
                    name,
                    tenant=rng.choice(TENANTS),
                    memory=f"{rng.choice((2, 4, 8, 12, 20))}Gi",
                    priority=rng.choice((0, 0, 5)),
                    queued_at=format_time(now),
                    **extra,
                )
            elif roll < 0.55 and pods:  # a pod finishes
                name = rng.choice(sorted(pods))
                pods[name] = _remade(pods[name], phase="Succeeded")
            elif roll < 0.65 and pods:  # a pod is deleted
                del pods[rng.choice(sorted(pods))]
            elif roll < 0.72:  # a GpuQuota changes
                i = rng.randrange(len(quotas))
                quotas[i] = replace(quotas[i], nominal=rng.choice((8, 16, 32, 48)) * GiB)
            elif roll < 0.8 and pods:  # a new but equal view (a change nothing reads)
                name = rng.choice(sorted(pods))
                pods[name] = _remade(pods[name])
            listed = sorted(pods.values(), key=lambda p: p.key)
            tenants = sorted({q.name for q in quotas} | {p.tenant for p in listed}
                             | {DEFAULT_TENANT})  # fmt: skip

            meter = Meter.snapshot(QuotaBook(quotas), held, now)

            def one(
                some: Any, theirs: Any, said: Any, at: float = now, by: Meter = meter
            ) -> AdmissionPlan:
                return plan_admission(
                    some, theirs, at, default_tenant=DEFAULT_TENANT, mode=FifoMode.BEST_EFFORT,
                    quota_problems=said, meter=by,
                )  # fmt: skip

            made = groups.plan(
                tenant_groups(tenants, quotas, listed), listed, quotas, {}, None, one
            )
            before = dict(groups._last)
            groups.round_done()
            kept += groups.kept_last_round
            waiting += sum(
                1 for g, m in groups._last.items() if m is before.get(g) and m.plan.queued
            )
            whole = _whole(listed, quotas, now, meter)
            assert _said(made) == _said(whole), (seed, step)
            held = [x for x in whole.ledger if x.tenant in {q.name for q in quotas}]
            for admit in whole.admit:  # the admitted pods' writes land
                pods[admit.pod.name] = _admitted(pods[admit.pod.name], whole, now)
        assert kept > 0, seed  # groups were kept, not planned again
        assert waiting > 0, seed  # among them groups with a queue (no tenant reads the meter)


def test_a_cohort_whose_quotas_clash_blocks_only_its_own_tenants() -> None:
    """A cohort mixing quota resources (the webhook refuses it; one written around the webhook)
    admits nothing in that cohort, and says why; a tenant outside it is admitted as ever (one
    plan over every tenant blocked them all)."""
    from gpupool.quota.resource import Resource

    quotas = [
        TenantQuota("alpha", nominal=32 * GiB, cohort="c1"),
        TenantQuota("beta", nominal=8000, cohort="c1", resource=Resource.GPU),
        TenantQuota("eps", nominal=40 * GiB),
    ]
    pods = [view(f"{t}-1", tenant=t, memory="4Gi") for t in ("alpha", "beta", "eps")]
    tenants = ["alpha", "beta", "eps", DEFAULT_TENANT]

    def one(some: Any, theirs: Any, said: Any) -> AdmissionPlan:
        return plan_admission(some, theirs, 100.0, default_tenant=DEFAULT_TENANT,
                              quota_problems=said)  # fmt: skip

    plan = GroupPlans().plan(tenant_groups(tenants, quotas, pods), pods, quotas, {}, None, one)
    assert [a.pod.name for a in plan.admit] == ["eps-1"]
    stuck = {q.pod.name: (q.reason, q.detail) for q in plan.queued}
    assert set(stuck) == {"alpha-1", "beta-1"}
    assert all(reason == "NO_QUOTA" and "mixes quota resources" in detail
               for reason, detail in stuck.values())  # fmt: skip
    assert not _whole(pods, quotas, 100.0, Meter.snapshot(QuotaBook([]), [], 100.0)).admit
