"""Every tenant's quota, grouped into cohorts, checked together (and against capacity if known)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from gpupool.domain.errors import InvalidQuota
from gpupool.quota.resource import Resource
from gpupool.quota.spec import TenantQuota


class QuotaBook:
    """Tenant quotas by name. Raises InvalidQuota when they cannot hold together.

    `capacity` (per resource: bytes of GPU memory, milli-GPU) lets the book report cohorts, and
    tenants outside any cohort, whose guarantees add up to more than the cluster has: a guarantee
    nobody can honour is a misconfiguration, not something to discover at reclaim time.
    """

    def __init__(
        self, quotas: Iterable[TenantQuota], capacity: Mapping[Resource, int] | None = None
    ) -> None:
        self._by_name: dict[str, TenantQuota] = {}
        for quota in quotas:
            if quota.name in self._by_name:
                raise InvalidQuota(f"tenant {quota.name!r} has two quotas; keep one")
            self._by_name[quota.name] = quota
        self._cohorts: dict[str, tuple[TenantQuota, ...]] = {}
        for quota in self._by_name.values():
            if quota.cohort is not None:
                self._cohorts[quota.cohort] = (*self._cohorts.get(quota.cohort, ()), quota)
        for cohort, members in self._cohorts.items():
            resources = {m.resource for m in members}
            if len(resources) > 1:
                listing = ", ".join(f"{m.name}: {m.resource.value}" for m in members)
                raise InvalidQuota(
                    f"cohort {cohort!r} mixes quota resources ({listing}); tenants can lend to "
                    f"each other only in one resource, so give them all the same one"
                )
        if capacity is not None:
            self._check_guarantees(capacity)

    def _check_guarantees(self, capacity: Mapping[Resource, int]) -> None:
        for resource, total in capacity.items():
            quotas = [q for q in self._by_name.values() if q.resource is resource]
            promised = sum(q.guaranteed for q in quotas)
            if promised > total:
                by_cohort: dict[str, int] = {}
                for q in quotas:
                    key = q.cohort or f"(tenant {q.name})"
                    by_cohort[key] = by_cohort.get(key, 0) + q.guaranteed
                parts = ", ".join(
                    f"{k}: {resource.format(v)}" for k, v in sorted(by_cohort.items())
                )
                raise InvalidQuota(
                    f"guaranteed {resource.value} quotas add up to {resource.format(promised)} but "
                    f"the cluster has {resource.format(total)} ({parts}); lower the guarantees "
                    f"or add capacity"
                )

    def get(self, tenant: str) -> TenantQuota | None:
        return self._by_name.get(tenant)

    def __getitem__(self, tenant: str) -> TenantQuota:
        quota = self._by_name.get(tenant)
        if quota is None:
            raise InvalidQuota(f"tenant {tenant!r} has no quota; known tenants: {self.names()}")
        return quota

    def __contains__(self, tenant: object) -> bool:
        return tenant in self._by_name

    def __iter__(self) -> Iterator[TenantQuota]:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)

    def names(self) -> list[str]:
        return sorted(self._by_name)

    def cohort(self, name: str | None) -> tuple[TenantQuota, ...]:
        if name is None:
            return ()
        return self._cohorts.get(name, ())

    def cohorts(self) -> list[str]:
        return sorted(self._cohorts)

    def pool_capacity(self, cohort: str | None) -> int:
        """What a cohort's members may lend each other in all: the sum of their lendable quota."""
        return sum(m.lendable for m in self.cohort(cohort))
