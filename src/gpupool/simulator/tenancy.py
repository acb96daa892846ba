"""Tenants for a trace replay: their quotas and which trace pods belong to each.

The Alibaba trace names no team, so a replay needs a rule that gives each pod a tenant. A tenant
claims pods by their QoS class (`qos: [LS]`); at most one tenant may leave `qos` out and take every
pod no other tenant claims.

Default, when no tenants file is given (three tenants in one cohort, quota in milli-GPU):
- `ls` takes the latency-sensitive pods (QoS `LS`, pod priority 1),
- `be` takes the best-effort pods (QoS `BE`),
- `other` takes the rest (`Burstable`, `Guaranteed`, unlabelled);
- each tenant's nominal quota is its share of the trace's total GPU request (sum over pods of
  the GPUs they ask for) times the cluster's GPU capacity, so the nominal quotas add up to the
  cluster; guaranteed is half of nominal; borrow and lend limits are open; grace period 30 s.
Static quotas sized from total requests is how an administrator would split a pool; what the
tenants actually hold over time differs, which is what borrowing is for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpupool.domain.errors import InvalidQuota
from gpupool.quota.queue import FifoMode
from gpupool.quota.resource import Resource
from gpupool.quota.spec import TenantQuota
from gpupool.simulator.openb import TracePod

DEFAULT_COHORT = "pool"


@dataclass(frozen=True, slots=True)
class TenantRule:
    quota: TenantQuota
    qos: tuple[str, ...] | None  # None: every pod no other tenant claims
    pod_priority: int = 0


@dataclass(frozen=True, slots=True)
class Tenancy:
    rules: tuple[TenantRule, ...]
    resource: Resource = Resource.GPU
    fifo: FifoMode = FifoMode.BEST_EFFORT

    def __post_init__(self) -> None:
        if not self.rules:
            raise InvalidQuota("a replay needs at least one tenant")
        catch_all = [r.quota.name for r in self.rules if r.qos is None]
        if len(catch_all) > 1:
            raise InvalidQuota(
                f"tenants {', '.join(catch_all)} all leave out `qos`; only one tenant may take "
                f"the pods no other tenant claims"
            )
        claimed: dict[str, str] = {}
        for rule in self.rules:
            for qos in rule.qos or ():
                if qos in claimed:
                    raise InvalidQuota(
                        f"QoS {qos!r} is claimed by both {claimed[qos]!r} and {rule.quota.name!r}"
                    )
                claimed[qos] = rule.quota.name
            if rule.quota.resource is not self.resource:
                raise InvalidQuota(
                    f"tenant {rule.quota.name!r} counts {rule.quota.resource.value} but the replay "
                    f"counts {self.resource.value}"
                )

    @property
    def quotas(self) -> list[TenantQuota]:
        return [r.quota for r in self.rules]

    def assign(self, pod: TracePod) -> TenantRule | None:
        fallback = None
        for rule in self.rules:
            if rule.qos is None:
                fallback = rule
            elif pod.qos in rule.qos:
                return rule
        return fallback

    def without_borrowing(self) -> Tenancy:
        rules = tuple(
            replace(r, quota=replace(r.quota, borrow_limit=0 if r.quota.cohort else None))
            for r in self.rules
        )
        return replace(self, rules=rules)


DEFAULT_GROUPS: tuple[tuple[str, tuple[str, ...] | None, int], ...] = (
    ("ls", ("LS",), 1),
    ("be", ("BE",), 0),
    ("other", None, 0),
)


def default_tenancy(pods: Sequence[TracePod], capacity_milli: int) -> Tenancy:
    """Three tenants by QoS, nominal quota in proportion to their total GPU request."""
    demand = {name: 0 for name, _, _ in DEFAULT_GROUPS}
    for pod in pods:
        for name, qos, _ in DEFAULT_GROUPS:
            if qos is None or pod.qos in qos:
                demand[name] += pod.request.gpu_request_milli
                break
    total = sum(demand.values()) or 1
    rules = []
    given = 0
    for k, (name, qos, priority) in enumerate(DEFAULT_GROUPS):
        if k == len(DEFAULT_GROUPS) - 1:
            nominal = capacity_milli - given
        else:
            nominal = capacity_milli * demand[name] // total
        given += nominal
        quota = TenantQuota(
            name=name,
            nominal=nominal,
            guaranteed=nominal // 2,
            resource=Resource.GPU,
            cohort=DEFAULT_COHORT,
            priority=priority,
        )
        rules.append(TenantRule(quota=quota, qos=qos, pod_priority=priority))
    return Tenancy(rules=tuple(rules))
