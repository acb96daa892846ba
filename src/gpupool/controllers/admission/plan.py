"""The admission queue's decision over one snapshot, pure: which gated pods to admit now, and
where every other gated pod stands (position in its tenant's queue and why it waits).

Usage comes from the pods already admitted (gate removed, not finished), each charged through a
quota `Lease` as the quota core counts it; gated pods are offered in priority then submit order
per tenant (`quota.AdmissionQueue`), each decided by `quota.decide` against the ledger as it
grows with this round's admissions. The tenant `default` (namespaces without a tenant label) is
unlimited unless a GpuQuota named `default` exists; any other tenant needs its GpuQuota.

A pod's borrowed mark is its live GpuLease's `spec.borrowed` / `spec.preemptible` (copied at bind
from `gpupool.io/admitted`), or the annotation itself while it has no live lease yet
(`charge.mark_borrowed`). The plan is the round's one decision on quota: the reclaim round
consumes it (its ledger, its reclaim asks) instead of deciding again.

A pod is charged for what it holds (`admission.charge`: its GpuLease's amount once bound, the
most it may take before). The implicit default tenant is not limited: its pods are admitted
whatever they ask, and the reason says so rather than citing a made-up quota.

A gang (pods sharing `gpupool.io/gang` in one namespace, docs/gangs.md) is one queue entry: it
waits, holding back nobody, until its live members (gated or admitted, not finished, not being
deleted) are exactly its size, then its gated members are decided together (`quota.gang`): all
admitted in this round, or all wait with the gang's reason. Members that disagree on the size,
or more live members than the size, are told so and never admitted.

`plan_admission` runs the round as module-level steps over one `RoundState` (the ledger as it
grows, the entries' pods, what was decided): `open_round`, `fill_queue`, `attempt` for each
entry the queue offers (`attempt_gang` for a gang, after `gang_not_ready`), `queue_positions`
and `tenant_statuses`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from gpupool.controllers.admission.charge import (
    KeptCharges,
    card_memory,
    charged_lease,
    held_amount,
)
from gpupool.domain.errors import GpupoolError, InvalidQuota
from gpupool.quota.admission import Admit, Ask, Reject, Wait, WaitReason, decide
from gpupool.quota.book import QuotaBook
from gpupool.quota.gang import GangAdmit, decide_gang
from gpupool.quota.lease import Lease
from gpupool.quota.ledger import Ledger
from gpupool.quota.metering import Meter
from gpupool.quota.queue import AdmissionQueue, FifoMode, Outcome, QueueEntry
from gpupool.quota.resource import Resource
from gpupool.quota.spec import TenantQuota
from gpupool.state.pods import PodView

UNLIMITED = 2**62  # the nominal quota of the implicit `default` tenant
GANG_ENTRY = "gang:"  # the queue entry of a gang: `gang:<namespace>/<name>`


@dataclass(frozen=True, slots=True)
class AdmitPod:
    pod: PodView
    borrowed: int
    preemptible: bool
    reason: str
    # The pod's amount in its tenant quota's resource: the bind writes both into the GpuLease so
    # `amount` and `borrowed` are in one unit (milli-GPU for a `gpu` quota, bytes otherwise).
    resource: str | None = None
    amount: int | None = None


@dataclass(frozen=True, slots=True)
class QueuedPod:
    pod: PodView
    position: int
    queued: int  # how many wait in the tenant's queue
    reason: str  # a WaitReason name, REJECTED or UNREADABLE
    detail: str

    @property
    def note(self) -> str:
        """The pod's gpupool.io/queue annotation and event message."""
        return (
            f"position {self.position} of {self.queued} in the queue of tenant "
            f"{self.pod.tenant}: {self.detail}"
        )


@dataclass(frozen=True, slots=True)
class TenantStatus:
    tenant: str
    resource: Resource
    used: int
    borrowed: int
    lent: int
    pods: int
    queue: tuple[QueuedPod, ...]


@dataclass(frozen=True, slots=True)
class ReclaimAsk:
    """A tenant within its nominal quota whose pod waits for borrowers to give capacity back."""

    tenant: str
    needed: int
    pod: PodView


@dataclass(frozen=True, slots=True)
class AdmissionPlan:
    admit: tuple[AdmitPod, ...]
    queued: tuple[QueuedPod, ...]
    tenants: tuple[TenantStatus, ...]
    ledger: Ledger
    reclaim: tuple[ReclaimAsk, ...] = ()
    quota_problems: Mapping[str, str] = field(default_factory=dict)


def build_book(quotas: Iterable[TenantQuota], default_tenant: str) -> QuotaBook:
    """The tenants' quotas plus an unlimited `default_tenant` unless a quota is given for it."""
    listed = list(quotas)
    if not any(q.name == default_tenant for q in listed):
        listed.append(TenantQuota(default_tenant, nominal=UNLIMITED))
    return QuotaBook(listed)


def _live_members(pods: Iterable[PodView]) -> dict[str, list[PodView]]:
    """Gang key -> its members that count: gated or admitted, not finished, not being deleted
    (a replacement may then take a finished member's place)."""
    out: dict[str, list[PodView]] = {}
    for pod in pods:
        if pod.gang is not None and not pod.terminal and not pod.deleting:
            out.setdefault(pod.gang.key, []).append(pod)
    return out


def plan_admission(
    pods: Sequence[PodView],
    quotas: Iterable[TenantQuota],
    now: float,
    *,
    default_tenant: str,
    mode: FifoMode = FifoMode.BEST_EFFORT,
    meter: Meter | None = None,
    quota_problems: Mapping[str, str] | None = None,
    card_sizes: Mapping[str, int] | None = None,
    charged: KeptCharges | None = None,
) -> AdmissionPlan:
    """Decide this round. `default_tenant`: the tenant of pods without a tenant label (unlimited
    unless it has a quota); `quota_problems`: tenants whose GpuQuota cannot be read, and why;
    `card_sizes`: the cluster's cards (`charge.card_sizes_of`), to count whole GPUs in bytes;
    `charged`: the admitted pods' charges kept from the last round (`charge.KeptCharges`)."""
    state = open_round(
        pods, quotas, now, default_tenant, meter, quota_problems or {}, card_sizes or {}, charged
    )
    queue = fill_queue(state, pods, mode)
    queue.drain(partial(attempt, state))
    per_tenant = queue_positions(queue, state)
    return AdmissionPlan(
        tuple(state.admit),
        tuple(item for line in per_tenant.values() for item in line),
        tenant_statuses(state.book, state.ledger, per_tenant),
        state.ledger,
        tuple(state.reclaim),
        state.problems,
    )


@dataclass(slots=True)
class RoundState:
    """One admission round as it goes: the quotas and the ledger (usage, growing with this
    round's admissions), the queue entries' pods, and what the round has decided so far."""

    book: QuotaBook
    ledger: Ledger
    now: float
    meter: Meter | None
    sizes: Mapping[str, int]  # the cluster's cards (`charge.card_sizes_of`)
    unlimited: str | None  # the implicit default tenant, when it has no GpuQuota
    problems: dict[str, str]  # tenant -> why its GpuQuota cannot be used
    members: dict[str, list[PodView]] = field(default_factory=dict)  # entry id -> its pods
    live_members: dict[str, list[PodView]] = field(default_factory=dict)  # gang key -> live pods
    admit: list[AdmitPod] = field(default_factory=list)
    stuck: dict[str, tuple[str, str]] = field(default_factory=dict)  # entry id -> code, detail
    reclaim: list[ReclaimAsk] = field(default_factory=list)

    def set_stuck(
        self, entry_id: str, code: str, detail: str, *, holds_line: bool = True
    ) -> Outcome:
        """The entry cannot be admitted as it is: `code` and `detail` are what its pods show."""
        self.stuck[entry_id] = (code, detail)
        return Outcome(False, None, detail, holds_line=holds_line)


def open_round(
    pods: Sequence[PodView],
    quotas: Iterable[TenantQuota],
    now: float,
    default_tenant: str,
    meter: Meter | None,
    quota_problems: Mapping[str, str],
    card_sizes: Mapping[str, int],
    charged: KeptCharges | None = None,
) -> RoundState:
    """The round's quotas (quotas that clash admit nothing: every tenant shows why) and its
    ledger charged with what the admitted pods hold. `charged`: each pod's charge given back
    while the pod's view, its quota and the card sizes are the same objects as last round (the
    caller ends the round's pass: `KeptCharges.pass_done`)."""
    problems = dict(quota_problems)
    sizes = dict(card_sizes)
    quotas = list(quotas)
    unlimited = None if any(q.name == default_tenant for q in quotas) else default_tenant
    try:
        book = build_book(quotas, default_tenant)
    except InvalidQuota as err:
        # Quotas that clash (the validating webhook normally prevents it): admit nothing.
        book = build_book((), default_tenant)
        problems = {q.name: str(err) for q in quotas} | problems
    charges = []
    for pod in pods:
        request = pod.request
        if request is not None and pod.holds_quota:
            quota = book.get(pod.tenant)
            if quota is None:
                continue
            charges.append(
                charged_lease(pod, request, quota, sizes)
                if charged is None
                else charged.charge(pod, request, quota, sizes, card_sizes)
            )
    ledger = Ledger.of(book, charges)
    return RoundState(book, ledger, now, meter, sizes, unlimited, problems)


def fill_queue(state: RoundState, pods: Sequence[PodView], mode: FifoMode) -> AdmissionQueue:
    """The gated pods as queue entries, in submit order (a gang is one entry, at its earliest
    member's time and its highest priority); a pod that asks for no GPU is admitted at once."""
    queue = AdmissionQueue(mode, {q.name: q.priority for q in state.book})
    gangs: dict[str, list[PodView]] = {}
    # only the gated pods are sorted: in a fill, thousands of admitted pods and a few gated
    waiting = [pod for pod in pods if pod.gated and not pod.terminal and not pod.deleting]
    for pod in sorted(waiting, key=lambda p: (p.submitted_at, p.key)):
        if pod.request is None and pod.problem is None:
            state.admit.append(AdmitPod(pod, 0, False, "asks for no GPU"))
            continue
        if pod.gang is not None:
            gangs.setdefault(GANG_ENTRY + pod.gang.key, []).append(pod)
            continue
        state.members[pod.key] = [pod]
        queue.push(QueueEntry(pod.key, pod.tenant, pod.priority, pod.submitted_at))
    for entry_id, gated in gangs.items():
        state.members[entry_id] = gated
        queue.push(
            QueueEntry(
                entry_id,
                gated[0].tenant,
                max(p.priority for p in gated),
                min(p.submitted_at for p in gated),
            )
        )
    state.live_members = _live_members(pods)
    return queue


def ask_of(state: RoundState, pod: PodView, quota: TenantQuota) -> Ask:
    """What the pod asks of its quota (GpupoolError: it cannot be counted)."""
    assert pod.request is not None
    try:
        size = card_memory(pod, state.sizes, pod.request, quota.resource)
        return Ask.of(pod.request, quota.resource, size)
    except GpupoolError:
        if pod.tenant != state.unlimited:
            raise
        # Not limited: no card size needed to admit it; it is charged its whole cards.
        req = pod.request
        held = held_amount(req, quota.resource, pod, state.sizes)
        return Ask(req.tenant, held, req.compute_milli * req.gpu_count, req.exclusive,
                   req.priority)  # fmt: skip


def admitted_lease(state: RoundState, pod: PodView, quota: TenantQuota, verdict: Admit) -> Lease:
    """The lease the pod holds once admitted now (borrowed and preemptible as decided)."""
    assert pod.request is not None
    return replace(
        charged_lease(pod, pod.request, quota, state.sizes),
        reserved_at=state.now,
        borrowed=verdict.borrowed,
        preemptible=verdict.preemptible,
    )


def record_admit(
    state: RoundState, pod: PodView, quota: TenantQuota, verdict: Admit, ask: Ask
) -> Lease:
    """The pod is admitted this round (the reason says so when its tenant is not limited);
    returns its lease, for the caller to add to the ledger."""
    if pod.tenant == state.unlimited:
        verdict = replace(
            verdict, reason=f"tenant {state.unlimited!r} has no GpuQuota, so it is not limited"
        )
    state.admit.append(
        AdmitPod(
            pod,
            verdict.borrowed_amount,
            verdict.preemptible,
            verdict.reason,
            quota.resource.value,
            ask.amount,
        )
    )
    return admitted_lease(state, pod, quota, verdict)


def no_quota(state: RoundState, entry_id: str, tenant: str) -> Outcome:
    why = state.problems.get(tenant) or (
        f"tenant {tenant!r} has no GpuQuota; ask an administrator to create "
        f"GpuQuota {tenant!r}, or move the pod to a namespace of another tenant"
    )
    return state.set_stuck(entry_id, "NO_QUOTA", why)


def attempt(state: RoundState, entry: QueueEntry) -> Outcome:
    """Decide one queue entry against the ledger as it stands (the queue's `drain` calls it)."""
    if entry.id.startswith(GANG_ENTRY):
        return attempt_gang(state, entry.id, state.members[entry.id])
    pod = state.members[entry.id][0]
    if pod.problem is not None or pod.request is None:
        state.stuck[entry.id] = ("UNREADABLE", pod.problem or "unreadable request")
        return Outcome(False, None, f"cannot be admitted: {pod.problem}")
    quota = state.book.get(pod.tenant)
    if quota is None:
        return no_quota(state, entry.id, pod.tenant)
    try:
        ask = ask_of(state, pod, quota)
    except GpupoolError as err:
        return state.set_stuck(entry.id, "REJECTED", str(err))
    verdict = decide(state.ledger, ask, state.now, state.meter)
    if isinstance(verdict, Admit):
        state.ledger.add(record_admit(state, pod, quota, verdict, ask))
        return Outcome(True)
    if isinstance(verdict, Reject):
        return state.set_stuck(entry.id, "REJECTED", f"can never be admitted: {verdict.reason}")
    assert isinstance(verdict, Wait)
    if verdict.reason is WaitReason.RECLAIM_NEEDED:
        state.reclaim.append(ReclaimAsk(pod.tenant, verdict.reclaim_needed, pod))
    return Outcome(False, verdict.reason, verdict.detail)


def gang_not_ready(state: RoundState, entry_id: str, gated: list[PodView]) -> Outcome | None:
    """Why a gang cannot be decided yet (an unreadable member, members that disagree on its
    size or tenant, too few or too many live members), or None when it can."""
    first = gated[0]
    assert first.gang is not None
    key, size = first.gang.key, first.gang.size
    live = state.live_members.get(key, [])
    claimed = sorted({p.gang.size for p in live if p.gang is not None})
    tenants = sorted({p.tenant for p in live})
    problem = next((p for p in gated if p.problem is not None or p.request is None), None)
    if problem is not None:
        why = f"member {problem.name} cannot be admitted: {problem.problem}"
        return state.set_stuck(entry_id, "UNREADABLE", f"gang {key!r}: {why}")
    if len(claimed) > 1:
        return state.set_stuck(
            entry_id,
            "GANG_CONFLICT",
            f"gang {key!r}: its members disagree on the gang's size "
            f"({', '.join(map(str, claimed))}), so none is admitted; delete the members "
            f"whose size is wrong and create them again",
            holds_line=False,
        )
    if len(tenants) > 1:
        return state.set_stuck(
            entry_id,
            "GANG_CONFLICT",
            f"gang {key!r}: its members belong to tenants {', '.join(tenants)} (the "
            f"namespace's tenant changed in between); a gang is admitted against one "
            f"tenant's quota: delete the members of the wrong tenant",
            holds_line=False,
        )
    if len(live) < size:
        return Outcome(
            False,
            WaitReason.GANG_INCOMPLETE,
            f"gang {key!r}: {len(live)} of {size} members created; it is admitted once "
            f"all {size} exist",
            holds_line=False,
        )
    if len(live) > size:
        return state.set_stuck(
            entry_id,
            "GANG_CONFLICT",
            f"gang {key!r} has {len(live)} live members but its size is {size}, so none "
            f"waiting is admitted; delete the extra members",
            holds_line=False,
        )
    return None


def attempt_gang(state: RoundState, entry_id: str, gated: list[PodView]) -> Outcome:
    """Decide a gang's waiting members together: all admitted now, or all wait."""
    not_ready = gang_not_ready(state, entry_id, gated)
    if not_ready is not None:
        return not_ready
    first = gated[0]
    assert first.gang is not None
    key = first.gang.key
    quota = state.book.get(first.tenant)
    if quota is None:
        return no_quota(state, entry_id, first.tenant)
    try:
        asks = [ask_of(state, p, quota) for p in gated]
    except GpupoolError as err:
        return state.set_stuck(entry_id, "REJECTED", f"gang {key!r}: {err}")

    def lease_of(i: int, verdict: Admit) -> Lease:
        assert quota is not None
        return admitted_lease(state, gated[i], quota, verdict)

    verdict = decide_gang(state.ledger, key, asks, state.now, lease_of, state.meter)
    if isinstance(verdict, GangAdmit):  # its leases are in the ledger already
        for pod, ask, one in zip(gated, asks, verdict.admits, strict=True):
            record_admit(state, pod, quota, one, ask)
        return Outcome(True)
    if isinstance(verdict, Reject):
        return state.set_stuck(entry_id, "REJECTED", f"can never be admitted: {verdict.reason}")
    if verdict.reason is WaitReason.RECLAIM_NEEDED and verdict.reclaim_needed:
        state.reclaim.append(ReclaimAsk(first.tenant, verdict.reclaim_needed, first))
    return Outcome(False, verdict.reason, verdict.detail)


def queue_positions(queue: AdmissionQueue, state: RoundState) -> dict[str, list[QueuedPod]]:
    """Every pod still in the queue, by the tenant whose line it is in: its place in that line
    and why it waits (the reason the round recorded for a stuck entry, else the queue's)."""
    per_tenant: dict[str, list[QueuedPod]] = {}
    for tenant in queue.tenants():
        line = list(queue.entries(tenant))
        for entry in line:
            waiting = queue.status(entry.id)
            code, detail = state.stuck.get(
                entry.id,
                (waiting.reason.name if waiting.reason else "QUEUED", waiting.detail),
            )
            for pod in state.members[entry.id]:
                item = QueuedPod(pod, waiting.position, len(line), code, detail)
                per_tenant.setdefault(tenant, []).append(item)
    return per_tenant


def tenant_statuses(
    book: QuotaBook, ledger: Ledger, per_tenant: Mapping[str, Sequence[QueuedPod]]
) -> tuple[TenantStatus, ...]:
    """Each tenant's usage after the round and its queue."""
    return tuple(
        TenantStatus(
            tenant=q.name,
            resource=q.resource,
            used=ledger.used(q.name),
            borrowed=ledger.borrowed(q.name),
            lent=ledger.lent(q.name),
            pods=ledger.pods(q.name),
            queue=tuple(per_tenant.get(q.name, ())),
        )
        for q in book
    )
