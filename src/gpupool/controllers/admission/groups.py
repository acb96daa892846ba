"""The admission round decided group by group of tenants that can sway each other, a group at
rest kept from one round to the next instead of decided again. Pure.

Tenants sway each other's admission only through a cohort (what one borrows another cannot
lend) and through a gang whose members' tenants differ (the plan refuses such a gang, so it
must see every member); everything else a tenant's decision reads is its own (its pods, its
GpuQuota) or read by all alike and never written (the card sizes, the budget meter). So the
round's plan is the union of `plan_admission` made over each group's pods and quotas. A group
whose pods, GpuQuotas, quota problems and card sizes are the very objects its last plan was
made from, and whose last plan admitted nothing, would be planned the same again unless time
alone moves its verdicts: it is kept. Time moves them only through the budget meter (a budget
window opens, idle quota may be lent: `budget.plan.metered_tenant`), so a group with such a
tenant is kept only at rest (nothing waiting, nothing asked back); any other group is kept with
its queue too: a queue that cannot move costs nothing until something in it changes.
A cohort whose quotas clash (mixed resources) admits nothing, as the whole round did before;
now only that cohort.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import is_

from gpupool.controllers.admission.plan import AdmissionPlan
from gpupool.controllers.budget.plan import metered_tenant
from gpupool.quota.book import QuotaBook
from gpupool.quota.ledger import Ledger
from gpupool.quota.spec import TenantQuota
from gpupool.state.pods import PodView

Group = tuple[str, ...]  # its tenants, sorted
PlanOne = Callable[[Sequence[PodView], Sequence[TenantQuota], Mapping[str, str]], AdmissionPlan]


def tenant_groups(
    tenants: Iterable[str], quotas: Iterable[TenantQuota], pods: Iterable[PodView]
) -> list[Group]:
    """The tenants parted into groups: a cohort's members together, and the tenants of one
    gang's members together; every other tenant alone. Sorted, so a round's groups are the
    same while the tenants and their cohorts are."""
    parent: dict[str, str] = {t: t for t in tenants}

    def root(t: str) -> str:
        while parent[t] != t:
            parent[t] = parent[parent[t]]
            t = parent[t]
        return t

    def join(a: str, b: str) -> None:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    first_of: dict[str, str] = {}  # cohort or gang -> the first tenant seen in it
    for quota in quotas:
        if quota.cohort is not None and quota.name in parent:
            join(first_of.setdefault("cohort:" + quota.cohort, quota.name), quota.name)
    for pod in pods:
        if pod.gang is not None and pod.tenant in parent:
            join(first_of.setdefault("gang:" + pod.gang.key, pod.tenant), pod.tenant)
    groups: dict[str, list[str]] = {}
    for t in parent:
        groups.setdefault(root(t), []).append(t)
    return sorted(tuple(sorted(members)) for members in groups.values())


@dataclass(frozen=True, slots=True)
class _Made:
    """A group's plan and what it was made from."""

    pods: tuple[PodView, ...]
    quotas: tuple[TenantQuota, ...]
    problems: Mapping[str, str]
    sizes: object
    plan: AdmissionPlan

    def same(
        self,
        pods: Sequence[PodView],
        quotas: Sequence[TenantQuota],
        problems: Mapping[str, str],
        sizes: object,
    ) -> bool:
        return (
            sizes is self.sizes
            and len(pods) == len(self.pods)
            and len(quotas) == len(self.quotas)
            and all(map(is_, pods, self.pods))
            and all(map(is_, quotas, self.quotas))
            and problems == self.problems
        )

    @property
    def standing(self) -> bool:
        """Whether the plan would be made the same again from the same objects: it admitted
        nothing (the admitted leases start now), and either no tenant of the group reads the
        meter or nothing waits."""
        if self.plan.admit:
            return False
        timeless = not any(metered_tenant(q) for q in self.quotas)
        return timeless or not (self.plan.queued or self.plan.reclaim)


class GroupPlans:
    """The last round's plan of each group (`plan`); a group not planned in a round is
    forgotten at its end (`round_done`)."""

    def __init__(self) -> None:
        self._last: dict[Group, _Made] = {}
        self._this: dict[Group, _Made] = {}
        self._kept = 0
        self.kept_last_round = 0  # groups whose plan the last round kept (did not decide again)

    def plan(
        self,
        groups: Sequence[Group],
        pods: Sequence[PodView],
        quotas: Sequence[TenantQuota],
        problems: Mapping[str, str],
        sizes: object,
        plan_one: PlanOne,
    ) -> AdmissionPlan:
        """The round's plan over `groups`: each group's kept or made by `plan_one(its pods, its
        quotas, its problems)`, joined. `sizes`: the card sizes `plan_one` reads (kept plans
        need the same object)."""
        pods_of: dict[str, list[PodView]] = {}
        for pod in pods:
            pods_of.setdefault(pod.tenant, []).append(pod)
        quota_of = {q.name: q for q in quotas}
        parts: list[tuple[Group, AdmissionPlan]] = []
        for group in groups:
            mine = [p for t in group for p in pods_of.get(t, ())]
            theirs = [quota_of[t] for t in group if t in quota_of]
            said = {t: problems[t] for t in group if t in problems}
            last = self._last.get(group) or self._this.get(group)
            if last is not None and last.standing and last.same(mine, theirs, said, sizes):
                made = last
                self._kept += 1
            else:
                made = _Made(tuple(mine), tuple(theirs), said, sizes, plan_one(mine, theirs, said))
            self._this[group] = made
            parts.append((group, made.plan))
        return joined(parts)

    def round_done(self) -> None:
        """This round's plans are the ones kept for the next."""
        self._last, self._this = self._this, {}
        self.kept_last_round, self._kept = self._kept, 0


def joined(parts: Sequence[tuple[Group, AdmissionPlan]]) -> AdmissionPlan:
    """One plan from the groups' plans: each tenant's status, account and problem taken from its
    own group's plan (every group's book has the implicit default tenant; only its own counts)."""
    members = [(set(group), plan) for group, plan in parts]
    quotas = [q for ours, plan in members for q in plan.ledger.book if q.name in ours]
    owner = {t: plan.ledger for group, plan in parts for t in group}
    return AdmissionPlan(
        admit=tuple(a for _, plan in parts for a in plan.admit),
        queued=tuple(q for _, plan in parts for q in plan.queued),
        tenants=tuple(s for ours, plan in members for s in plan.tenants if s.tenant in ours),
        ledger=Ledger.joined(QuotaBook(quotas), owner),
        reclaim=tuple(r for _, plan in parts for r in plan.reclaim),
        quota_problems={
            t: why for ours, plan in members for t, why in plan.quota_problems.items() if t in ours
        },
    )
