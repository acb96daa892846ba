"""The controller's series: the quota layer (per tenant) and the cards as the cluster's state
holds them (allocated bytes, fragmentation), from what the controller reads each round.

`ControllerMetrics.observe` takes one round's reading; gauges are rebuilt from it at each scrape
(a tenant or card that is gone leaves no stale series), while the admission counter and the
queue-wait histogram accumulate over the process's life.

Amounts are in the tenant quota's resource unit, named by the `resource` label: bytes for
`gpu-memory`, milli-GPU for `gpu` (Kueue's `kueue_cluster_queue_resource_usage` does the same).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpupool.adapters.kubernetes.watch_cache import CONTROLLER_KINDS
from gpupool.adapters.metrics.fragmentation import MEASURE

WAIT_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 4 * 3600.0)
CARD_LABELS = ("Hostname", "gpu", "UUID", "modelName")
# The lease reconciler's integrity events (controllers.leases.reconcile), one series each.
INTEGRITY_REASONS = ("NotAdmitted", "LeaseRestored", "Fenced", "ChargeMismatch")


@dataclass(frozen=True, slots=True)
class TenantReading:
    tenant: str
    resource: str  # "gpu-memory" | "gpu"
    nominal: int
    guaranteed: int
    used: int
    borrowed: int
    lent: int
    pods: int  # admitted pods holding quota
    queued: int
    oldest_wait_s: float  # how long the head of its queue has waited; 0 when none waits
    gib_hours: float  # GiB-hours of the tenant's GpuLeases the API server still holds


@dataclass(frozen=True, slots=True)
class CardReading:
    node: str
    gpu: int
    uuid: str
    model: str
    total_bytes: int
    allocated_bytes: int
    fragmentation: float  # 0..1 (adapters.metrics.fragmentation)


@dataclass(frozen=True, slots=True)
class Admission:
    tenant: str
    borrowed: bool
    waited_s: float


@dataclass(frozen=True, slots=True)
class BudgetReading:
    """A tenant's budget in the window now (GpuQuota status's hours*; `unit` GiB-hours or
    GPU-hours)."""

    tenant: str
    unit: str
    limit: float
    used: float
    remaining: float


@dataclass(frozen=True, slots=True)
class ControllerReading:
    tenants: tuple[TenantReading, ...]
    cards: tuple[CardReading, ...]
    leases_by_phase: tuple[tuple[str, int], ...]
    budgets: tuple[BudgetReading, ...] = ()
    nodes_by_health: tuple[tuple[str, int], ...] = ()  # GpuNodes: Healthy, Suspect, Lost
    # per tenant: live GpuLeases charged other than what they hold (0 for a tenant without one)
    charge_mismatches: tuple[tuple[str, int], ...] = ()


# The reasons a controller writer reports (ports.Outcomes), shown at 0 from the start so that
# rate() and alerts see the series before the first one happens.
NOTICE_REASONS = ("QuotaReclaim", "RoomReclaim", "LeaseExpired", "BudgetDrain")
EVICTION_REASONS = ("QuotaReclaim", "RoomReclaim", "LeaseExpired", "BudgetDrain", "NodeLost")
NODE_HEALTH = ("Healthy", "Suspect", "Lost")
# The controller's loops (controllers.manager), each shown at 0 from the start.
LOOPS = ("node-health", "leases", "admission+reclaim", "metrics+pools", "autoscale", "defrag")
# A loop's round that failed as a whole (not one object) counts with this kind.
ROUND_KIND = "round"
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class _Latest(Collector):
    def __init__(self) -> None:
        self.reading = ControllerReading((), (), ())

    def collect(self) -> Iterator[Metric]:
        return iter(controller_gauges(self.reading))


class ControllerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._latest = _Latest()
        self.registry.register(self._latest)
        self.admissions = Counter(
            "gpupool_controller_admissions",
            "Pods admitted by quota (the gate removed), by tenant and whether they borrow",
            ["tenant", "borrowed"],
            registry=self.registry,
        )
        self.wait = Histogram(
            "gpupool_controller_admission_wait_seconds",
            "Time from a pod's submission (gpupool.io/queued-at) to its admission by quota "
            "(kueue_admission_wait_time_seconds)",
            ["tenant"],
            buckets=WAIT_BUCKETS,
            registry=self.registry,
        )

        self.integrity = Counter(
            "gpupool_controller_integrity_findings",
            "What the lease reconciler found and did, by the reason of the Warning event it wrote: "
            "NotAdmitted (a bound GPU pod without an admission record, once per pod), "
            "LeaseRestored (a bound pod's lost lease made again), Fenced (a pod deleted whose "
            "lease could not be restored), ChargeMismatch (a live lease charged other than what "
            "it holds, once per disagreement)",
            ["reason"],
            registry=self.registry,
        )
        for reason in INTEGRITY_REASONS:  # every series from the start: rate() needs a zero
            self.integrity.labels(reason)

        self.notices = Counter(
            "gpupool_controller_reclaim_notices",
            "Pods given a notice to leave (their grace period starts), by reason",
            ["reason"],
            registry=self.registry,
        )
        self.evictions = Counter(
            "gpupool_controller_evictions",
            "Pods the controller evicted through the Eviction API (or deleted, on a lost node), "
            "by reason",
            ["reason"],
            registry=self.registry,
        )
        for reason in NOTICE_REASONS:
            self.notices.labels(reason)
        for reason in EVICTION_REASONS:
            self.evictions.labels(reason)

        self.reconcile_errors = Counter(
            "gpupool_controller_reconcile_errors",
            "Objects whose decoding or handling failed in a loop's round, by loop and the "
            "object's kind (each set aside with a ReconcileFailed event and retried with "
            "backoff); kind 'round' for a round that failed as a whole",
            ["loop", "kind"],
            registry=self.registry,
        )
        self.reconcile_retries = Counter(
            "gpupool_controller_reconcile_retries",
            "Set-aside objects tried again once their backoff had passed, by loop",
            ["loop"],
            registry=self.registry,
        )
        self.reconcile_duration = Histogram(
            "gpupool_controller_reconcile_duration_seconds",
            "Time of one round of a loop (controller-runtime's "
            "controller_runtime_reconcile_time_seconds)",
            ["loop"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.set_aside = Gauge(
            "gpupool_controller_reconcile_set_aside_objects",
            "Objects a loop has set aside now because processing them failed (each retried "
            "with backoff until it succeeds or is gone)",
            ["loop"],
            registry=self.registry,
        )
        self.queue_wait = Histogram(
            "gpupool_controller_queue_wait_seconds",
            "Time a loop was owed a round (a watched change, its period) before the round "
            "started (controller-runtime's workqueue_queue_duration_seconds)",
            ["loop"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.queue_depth_now = Gauge(
            "gpupool_controller_queue_depth",
            "Loops owed a round now (controller-runtime's workqueue_depth)",
            registry=self.registry,
        )
        self.cache_objects = Gauge(
            "gpupool_controller_cache_objects",
            "Objects in the controller's watch cache, by kind",
            ["kind"],
            registry=self.registry,
        )
        self.watch_restarts = Counter(
            "gpupool_controller_watch_restarts",
            "Watches that failed and were resumed from their last resourceVersion, by kind",
            ["kind"],
            registry=self.registry,
        )
        self.relists = Counter(
            "gpupool_controller_relists",
            "Full lists of a kind after the first: its watch's version was gone (410) or the "
            "safety-net period passed",
            ["kind"],
            registry=self.registry,
        )
        for watched in CONTROLLER_KINDS:
            self.cache_objects.labels(watched.kind).set(0)
            self.watch_restarts.labels(watched.kind)
            self.relists.labels(watched.kind)
        for loop in LOOPS:
            self.queue_wait.labels(loop)
            self.reconcile_errors.labels(loop, ROUND_KIND)
            self.reconcile_retries.labels(loop)
            self.set_aside.labels(loop).set(0)

    # controllers.contain.ReconcileObserver and the manager's rounds
    def reconcile_failed(self, loop: str, kind: str) -> None:
        self.reconcile_errors.labels(loop, kind).inc()

    def reconcile_retried(self, loop: str) -> None:
        self.reconcile_retries.labels(loop).inc()

    def set_aside_now(self, loop: str, count: int) -> None:
        self.set_aside.labels(loop).set(count)

    def reconcile_took(self, loop: str, seconds: float) -> None:
        self.reconcile_duration.labels(loop).observe(max(0.0, seconds))

    def queue_waited(self, loop: str, seconds: float) -> None:
        self.queue_wait.labels(loop).observe(max(0.0, seconds))

    def queue_depth(self, loops: int) -> None:
        self.queue_depth_now.set(loops)

    # adapters.kubernetes.watch_cache.CacheObserver
    def cache_size(self, kind: str, objects: int) -> None:
        self.cache_objects.labels(kind).set(objects)

    def watch_restarted(self, kind: str) -> None:
        self.watch_restarts.labels(kind).inc()

    def relisted(self, kind: str) -> None:
        self.relists.labels(kind).inc()

    def record_integrity(self, reason: str) -> None:
        self.integrity.labels(reason).inc()

    # ports.Outcomes: the reconcilers report what they did
    def noticed(self, reason: str) -> None:
        self.notices.labels(reason).inc()

    def evicted(self, reason: str) -> None:
        self.evictions.labels(reason).inc()

    def observe(self, reading: ControllerReading) -> None:
        """The gauges show `reading` from now on."""
        self._latest.reading = reading

    def admitted(self, admissions: Iterable[Admission]) -> None:
        """Counts admissions (each round's, as it decides them) and their waits."""
        for a in admissions:
            self.admissions.labels(a.tenant, "true" if a.borrowed else "false").inc()
            self.wait.labels(a.tenant).observe(max(0.0, a.waited_s))


def controller_gauges(reading: ControllerReading) -> list[Metric]:
    t_labels = ["tenant", "resource"]

    def tenant_gauge(name: str, doc: str) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, labels=t_labels)

    nominal = tenant_gauge("gpupool_controller_tenant_nominal", "The tenant's nominal quota")
    guaranteed = tenant_gauge(
        "gpupool_controller_tenant_guaranteed", "The part of the nominal quota never reclaimed"
    )
    used = tenant_gauge(
        "gpupool_controller_tenant_used", "Quota held by the tenant's admitted pods (status.used)"
    )
    borrowed = tenant_gauge(
        "gpupool_controller_tenant_borrowed", "Quota the tenant uses beyond its nominal"
    )
    lent = tenant_gauge(
        "gpupool_controller_tenant_lent", "The tenant's unused nominal quota others borrow"
    )
    pods = GaugeMetricFamily(
        "gpupool_controller_tenant_pods", "Admitted pods holding quota", labels=["tenant"]
    )
    pending = GaugeMetricFamily(
        "gpupool_controller_tenant_pending_pods",
        "Pods waiting in the tenant's admission queue (kueue_pending_workloads)",
        labels=["tenant"],
    )
    oldest = GaugeMetricFamily(
        "gpupool_controller_tenant_oldest_wait_seconds",
        "How long the head of the tenant's queue has waited; 0 when none waits",
        labels=["tenant"],
    )
    gib_hours = GaugeMetricFamily(
        "gpupool_controller_tenant_gib_hours",
        "GiB-hours of the tenant's GpuLeases still held by the API server (ended ones until "
        "their retention ends)",
        labels=["tenant"],
    )
    for t in reading.tenants:
        key = [t.tenant, t.resource]
        nominal.add_metric(key, t.nominal)
        guaranteed.add_metric(key, t.guaranteed)
        used.add_metric(key, t.used)
        borrowed.add_metric(key, t.borrowed)
        lent.add_metric(key, t.lent)
        pods.add_metric([t.tenant], t.pods)
        pending.add_metric([t.tenant], t.queued)
        oldest.add_metric([t.tenant], t.oldest_wait_s)
        gib_hours.add_metric([t.tenant], t.gib_hours)
    total = GaugeMetricFamily(
        "gpupool_controller_card_memory_total_bytes",
        "Device memory of the card as its GpuNode reports it",
        labels=list(CARD_LABELS),
    )
    allocated = GaugeMetricFamily(
        "gpupool_controller_card_allocated_bytes",
        "Device memory the live GpuLeases take on the card",
        labels=list(CARD_LABELS),
    )
    frag = GaugeMetricFamily(
        "gpupool_controller_card_fragmentation_ratio",
        "Free share of the card that the common requests cannot use, ÷ the card (0-1)",
        labels=[*CARD_LABELS, "measure"],
    )
    for c in reading.cards:
        key = [c.node, str(c.gpu), c.uuid, c.model]
        total.add_metric(key, c.total_bytes)
        allocated.add_metric(key, c.allocated_bytes)
        frag.add_metric([*key, MEASURE], c.fragmentation)
    leases = GaugeMetricFamily("gpupool_controller_leases", "GpuLeases by phase", labels=["phase"])
    for phase, count in reading.leases_by_phase:
        leases.add_metric([phase], count)
    b_labels = ["tenant", "unit"]
    budget = GaugeMetricFamily(
        "gpupool_controller_tenant_budget_hours",
        "The tenant's budget for the window now (GpuQuota spec.budget), in its unit",
        labels=b_labels,
    )
    budget_used = GaugeMetricFamily(
        "gpupool_controller_tenant_budget_used_hours",
        "Budget used in the window now (status.hoursUsed)",
        labels=b_labels,
    )
    budget_left = GaugeMetricFamily(
        "gpupool_controller_tenant_budget_remaining_hours",
        "Budget left in the window now (status.hoursRemaining)",
        labels=b_labels,
    )
    for b in reading.budgets:
        budget.add_metric([b.tenant, b.unit], b.limit)
        budget_used.add_metric([b.tenant, b.unit], b.used)
        budget_left.add_metric([b.tenant, b.unit], b.remaining)
    nodes = GaugeMetricFamily(
        "gpupool_controller_nodes", "GpuNodes by health (the heartbeat's)", labels=["health"]
    )
    counted = dict(reading.nodes_by_health)
    for health in (*NODE_HEALTH, *sorted(set(counted) - set(NODE_HEALTH))):
        nodes.add_metric([health], counted.get(health, 0))
    mismatches = GaugeMetricFamily(
        "gpupool_controller_lease_charge_mismatches",
        "Live GpuLeases whose spec.amount disagrees with what their slices hold in the quota's "
        "resource (each has a ChargeMismatch Warning event); 0 when all agree",
        labels=["tenant"],
    )
    for tenant, count in reading.charge_mismatches:
        mismatches.add_metric([tenant], count)
    families: Sequence[Metric] = (
        nominal, guaranteed, used, borrowed, lent, pods, pending, oldest, gib_hours, total,
        allocated, frag, leases, budget, budget_used, budget_left, nodes, mismatches,
    )  # fmt: skip
    return list(families)
