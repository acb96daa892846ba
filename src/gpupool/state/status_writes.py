"""What the controllers write as the status of a GpuQuota, a GpuNode and a GpuPool, as values
(`ports.ClusterApi.patch_quota_status`, `patch_gpu_node_status`,
`DefragApi.patch_gpu_pool_status`): the adapter encodes them into the merge patches the CRDs take
(`adapters.kubernetes.status_writes`) and decodes what the API server holds into the same values
(`StoredStatus`), so a writer compares its own with the stored one (to write only a change) and
keeps the conditions others wrote, without reading JSON."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class Condition:
    """One entry of a status's `conditions` (metav1.Condition's fields; None: not written).
    A merge patch replaces the list whole, so a writer sends every other writer's back as it
    read them; a condition's fields beyond these are not kept."""

    type: str
    status: str
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None
    observed_generation: int | None = None


@dataclass(frozen=True, slots=True)
class QueueLine:
    """One waiting pod in a GpuQuota's `status.queue`."""

    namespace: str
    name: str
    position: int
    reason: str


@dataclass(frozen=True, slots=True)
class BudgetFields:
    """A tenant's budget standing (`quota.budget.BudgetStatus`, rounded and formatted as
    written: hours to 1e-6, times RFC 3339)."""

    hours_used: float
    hours_remaining: float
    hours_limit: float
    hours_unit: str
    hours_per_hour: float
    window_start: str
    window_end: str
    budget_exhausted: bool
    exhaustion_forecast: str | None


@dataclass(frozen=True, slots=True)
class QuotaStatusWrite:
    """A GpuQuota's status as the admission reconciler writes it. `budget` None: the budget
    fields are removed (merge-patch nulls); `observed_generation` None: not written (nor
    compared)."""

    used: str
    used_amount: int
    borrowed: str
    borrowed_amount: int
    lent: str
    lent_amount: int
    pods: int
    queued: int
    queue: tuple[QueueLine, ...]
    observed_generation: int | None
    budget: BudgetFields | None = None

    def same_as(self, stored: QuotaStatusWrite | None) -> bool:
        """Whether `stored` (the status the API server holds, decoded) already says all this."""
        if stored is None:
            return False
        if self.observed_generation is None:
            stored = replace(stored, observed_generation=None)
        return stored == self


@dataclass(frozen=True, slots=True)
class PoolFields:
    """The controller's own fields of a GpuPool's status (`controllers.pool_status`), formatted
    as written."""

    observed_generation: int
    nodes: int
    gpus: int
    capacity: str
    capacity_bytes: int
    allocated: str
    allocated_bytes: int
    fragmentation: str
    cards_over_threshold: int


@dataclass(frozen=True, slots=True)
class DefragRecord:
    """A GpuPool's `status.defrag`: its last defragmentation round."""

    last_round: str
    moves: int
    cleared: int
    fragmentation_before: str
    fragmentation_after: str


@dataclass(frozen=True, slots=True)
class PoolStatusWrite:
    """A merge patch of a GpuPool's status: each part not None is written, the others left as
    they are (`conditions`: the whole list, others' included)."""

    fields: PoolFields | None = None
    conditions: tuple[Condition, ...] | None = None
    defrag: DefragRecord | None = None


@dataclass(frozen=True, slots=True)
class GpuNodeHealthWrite:
    """A GpuNode's health as the controller's node health sets it, with the whole conditions
    list (its `Heartbeat` and the agent's, kept)."""

    health: str
    conditions: tuple[Condition, ...]


@dataclass(frozen=True, slots=True)
class StoredStatus:
    """The status of a GpuQuota, GpuNode or GpuPool as the API server holds it, decoded for
    its writer: the conditions (every writer's), and for a GpuQuota its status (None: none
    or not as the controller writes it), for a GpuPool the controller's fields (likewise)."""

    conditions: tuple[Condition, ...] = ()
    quota: QuotaStatusWrite | None = None
    pool: PoolFields | None = None

    def condition(self, kind: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == kind), None)

    def others(self, kind: str) -> tuple[Condition, ...]:
        """The conditions of every other type, in their order."""
        return tuple(c for c in self.conditions if c.type != kind)


NO_STATUS = StoredStatus()
