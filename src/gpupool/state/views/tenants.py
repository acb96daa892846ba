"""The tenants' side of the pool: quota (nominal, guaranteed, limits), what each holds, borrows
and lends, its budget burn and GiB-hours, from the quotas' specs, the controller's GpuQuota status
and the leases. A tenant with leases or waiting pods but no quota object shows too (the implicit
`default` tenant, or a quota the caller may not read)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpupool.quota.spec import TenantQuota
from gpupool.state.views.inputs import QuotaStatus
from gpupool.state.views.leases import LeasesView
from gpupool.state.views.queue import QueueItem


@dataclass(frozen=True, slots=True)
class TenantView:
    name: str
    resource: str | None  # gpu-memory | gpu; None without a readable quota
    nominal: int | None
    guaranteed: int | None
    borrow_limit: int | None
    lend_limit: int | None
    cohort: str | None
    used: int | None  # from the GpuQuota's status (None when it has none)
    borrowed: int | None
    lent: int | None
    pods: int | None
    budget_hours: float | None  # the budget's limit per window
    budget_window_s: float | None
    hours_used: float | None  # in the current window, as the controller reported
    live_leases: int
    memory_bytes: int  # held by its live leases
    gib_hours: float  # live and recent leases
    queued: int  # pods at its quota gate
    scheduling: int  # admitted, waiting for a card

    @property
    def use_fraction(self) -> float | None:
        if self.used is None or not self.nominal:
            return None
        return self.used / self.nominal


def build_tenants(
    quotas: Iterable[TenantQuota],
    statuses: Mapping[str, QuotaStatus],
    leases: LeasesView,
    queue: Iterable[QueueItem],
) -> tuple[TenantView, ...]:
    specs = {q.name: q for q in quotas}
    waiting = list(queue)
    names = set(specs) | set(statuses)
    names |= {x.tenant for x in (*leases.live, *leases.recent)} | {q.tenant for q in waiting}
    out = []
    for name in sorted(names):
        spec = specs.get(name)
        status = statuses.get(name)
        live = [x for x in leases.live if x.tenant == name]
        budget = spec.budget if spec is not None else None
        out.append(
            TenantView(
                name=name,
                resource=spec.resource.value if spec else None,
                nominal=spec.nominal if spec else None,
                guaranteed=spec.guaranteed if spec else None,
                borrow_limit=spec.borrow_limit if spec else None,
                lend_limit=spec.lend_limit if spec else None,
                cohort=spec.cohort if spec else None,
                used=status.used if status else None,
                borrowed=status.borrowed if status else None,
                lent=status.lent if status else None,
                pods=status.pods if status else None,
                budget_hours=budget.limit if budget else None,
                budget_window_s=budget.window_s if budget else None,
                hours_used=status.hours_used if status else None,
                live_leases=len(live),
                memory_bytes=sum(x.memory_bytes for x in live),
                gib_hours=sum(
                    x.gib_hours for x in (*leases.live, *leases.recent) if x.tenant == name
                ),
                queued=sum(1 for q in waiting if q.tenant == name and q.stage == "quota"),
                scheduling=sum(1 for q in waiting if q.tenant == name and q.stage != "quota"),
            )
        )
    return tuple(out)
