"""The charge auditor's decision, pure: which live GpuLeases are charged other than what they hold.

A lease's `amount` (in its `resource`: bytes for `gpu-memory`, milli-GPU for `gpu`) is what its
tenant's quota counts, what GpuQuota status shows and what the budget meters; it must be what the
lease's slices hold in that resource (`quota.resource.held_amount`: each slice's bytes, or its
share of the card it is on, a whole card 1000). Bind writes it so; a lease that disagrees was
written by hand, by an older gpupool, or by a bug, and its tenant is charged for more or less
than it holds.

`audit_charges` checks every lease whose phase holds capacity (Reserved, Bound, Active) against
the cards' sizes (`card_sizes`: card uuid -> the bytes its GpuNode offers slices, as placement
counts the card). A lease on a card no GpuNode reports is skipped, not flagged (its holding
cannot be told); so is one whose resource gpupool does not know. Each lease is judged alone.
The controller shows the findings per tenant on /metrics and writes a Warning event for each
(`leases.charge_reconcile`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpupool.domain.errors import InvalidRequest
from gpupool.quota.resource import Resource, charge_problem, held_amount
from gpupool.state.lease import LeaseRecord
from gpupool.state.nodes import GpuNodeObject

REASON = "ChargeMismatch"  # the Warning event's reason
REMEDY = (
    "its tenant's quota, GpuQuota status and budget count the lease's spec.amount, so the tenant "
    "is charged for other than it holds. gpupool's bind writes the amount its slices hold: if "
    "bind wrote this lease, report it as a gpupool bug; a lease made or edited by hand should be "
    "deleted with its pod (the pod's next bind charges what it holds)"
)


@dataclass(frozen=True, slots=True)
class ChargeFinding:
    """A live lease charged `charged` but holding `held`, both in `resource`."""

    lease: LeaseRecord
    resource: Resource
    charged: int
    held: int
    problem: str  # quota.resource.charge_problem's text

    @property
    def message(self) -> str:
        """The event's message: what disagrees and what to do."""
        return f"GpuLease {self.lease.key} is {self.problem}: {REMEDY}"


@dataclass(frozen=True, slots=True)
class ChargeAudit:
    findings: tuple[ChargeFinding, ...]
    checked: int  # live leases whose charge was judged (agreeing or not)
    skipped: tuple[LeaseRecord, ...]  # live leases on a card of unknown size, or unknown resource

    def by_tenant(self, tenants: Iterable[str] = ()) -> tuple[tuple[str, int], ...]:
        """Leases in disagreement per tenant, sorted: every tenant of `tenants` and of a finding
        (0 for a tenant without one)."""
        counts = dict.fromkeys(tenants, 0)
        for f in self.findings:
            counts[f.lease.tenant] = counts.get(f.lease.tenant, 0) + 1
        return tuple(sorted(counts.items()))


class CardSizes:
    """`card_sizes`, made again only when the GpuNodes are not the very objects of the last call
    (the readers remember a decoded GpuNode per resourceVersion, so an unchanged cluster hands
    the same ones): at 5,000 nodes a pass over their 26,000 cards every lease and metrics round
    was a tenth of the controller's CPU in a fill. The mapping it returns is shared: read it."""

    def __init__(self) -> None:
        self._nodes: tuple[GpuNodeObject, ...] = ()
        self._sizes: dict[str, int] = {}

    def __call__(self, gpunodes: Iterable[GpuNodeObject]) -> Mapping[str, int]:
        nodes = tuple(gpunodes)
        if len(nodes) != len(self._nodes) or any(
            a is not b for a, b in zip(nodes, self._nodes, strict=True)
        ):
            self._nodes, self._sizes = nodes, card_sizes(nodes)
        return self._sizes


def card_sizes(gpunodes: Iterable[GpuNodeObject]) -> dict[str, int]:
    """Card uuid -> the bytes the card offers slices (`allocatableBytes`, else `memoryBytes` less
    the node's reserve: `Gpu.memory_bytes` as the GpuNode reader gives it)."""
    return {
        gpu.uuid: gpu.memory_bytes
        for node in gpunodes
        for gpu in node.gpus
        if gpu.uuid and gpu.memory_bytes
    }


def _resource(text: str) -> Resource | None:
    try:
        return Resource.parse(text)
    except InvalidRequest:
        return None


def check_lease(lease: LeaseRecord, cards: Mapping[str, int]) -> ChargeFinding | None:
    """The lease's disagreement, or None when it agrees (callers skip leases `judgeable` says
    cannot be judged)."""
    resource = _resource(lease.resource)
    if resource is None:
        return None
    problem = charge_problem(lease.amount, lease.slices, resource, cards)
    held = held_amount(lease.slices, resource, cards)
    if problem is None or held is None:
        return None
    return ChargeFinding(lease, resource, lease.amount, held, problem)


def judgeable(lease: LeaseRecord, cards: Mapping[str, int]) -> bool:
    """Every card of the lease has a known size and its resource is one gpupool counts."""
    return _resource(lease.resource) is not None and all(s.uuid in cards for s in lease.slices)


def audit_charges(leases: Iterable[LeaseRecord], cards: Mapping[str, int]) -> ChargeAudit:
    findings: list[ChargeFinding] = []
    skipped: list[LeaseRecord] = []
    checked = 0
    for lease in leases:
        if not lease.holds_capacity:
            continue
        if not judgeable(lease, cards):
            skipped.append(lease)
            continue
        checked += 1
        finding = check_lease(lease, cards)
        if finding is not None:
            findings.append(finding)
    findings.sort(key=lambda f: f.lease.key)
    return ChargeAudit(tuple(findings), checked, tuple(skipped))
