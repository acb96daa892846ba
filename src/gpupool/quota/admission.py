"""The admission decision for one pod: admit (within nominal, or by borrowing), wait, or reject.

Rules, in order:
1. a tenant without a quota, or a pod that could never fit its quota (over nominal plus everything
   it could ever borrow, over its compute or pod limit) is rejected with the reason;
2. a spent GiB-hours budget blocks new work until the next window (`block`, and `drain`, whose
   running pods the controller also evicts), or admits it only as preemptible, as the quota says;
3. the pod and compute limits are hard: over them the pod waits;
4. within nominal the pod is admitted if the cohort's pool has room; if borrowers hold that room
   the pod waits with `reclaim_needed` set, for the caller to plan a reclaim;
5. over nominal the pod borrows the cohort's unused quota, within its borrow limit and the
   lenders' lend limits (the pool is the sum of lendable quota); exclusive pods never borrow;
   a lender with an idle time (`lend_after_idle_s`) lends only quota it has not used within it
   (`quota.idle`; needs the meter, which remembers the recently ended leases).
Verdicts are values; nothing here raises for a pod that merely has to wait.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from gpupool.domain.requests import Request
from gpupool.quota.ledger import Ledger
from gpupool.quota.metering import Meter
from gpupool.quota.resource import Resource, demand_of
from gpupool.quota.spec import TenantQuota


class WaitReason(Enum):
    OVER_NOMINAL_EXCLUSIVE = "exclusive pods never borrow and the tenant's nominal quota is in use"
    NO_COHORT = "over nominal quota and the tenant has no cohort to borrow from"
    BORROW_LIMIT = "borrowing this much would pass the tenant's borrow limit"
    COHORT_EXHAUSTED = "the cohort has no unused quota left to lend"
    LENDER_NOT_IDLE = "the cohort's unused quota has not been idle long enough to be lent"
    RECLAIM_NEEDED = "within nominal quota, but borrowers hold it: waiting for reclaim"
    POD_LIMIT = "the tenant is at its pod limit"
    COMPUTE_LIMIT = "the tenant is at its compute limit"
    BUDGET_EXHAUSTED = "the tenant's usage budget for this window is spent"
    QUEUE_ORDER = "behind an earlier pod of the same tenant (strict FIFO)"
    NO_FIT = "quota admits it but no card has room for it"
    GANG_INCOMPLETE = "its gang is admitted once all its members exist"


@dataclass(frozen=True, slots=True)
class Ask:
    """What one pod asks of its tenant's quota."""

    tenant: str
    amount: int  # in the tenant's quota resource
    compute_milli: int = 0
    exclusive: bool = False
    priority: int = 0

    @classmethod
    def of(cls, request: Request, resource: Resource, card_memory_bytes: int | None = None) -> Ask:
        return cls(
            tenant=request.tenant,
            amount=demand_of(request, resource, card_memory_bytes),
            compute_milli=request.compute_milli * request.gpu_count,
            exclusive=request.exclusive,
            priority=request.priority,
        )


@dataclass(frozen=True, slots=True)
class Admit:
    tenant: str
    amount: int
    borrowed_amount: int  # the part of `amount` above the tenant's nominal quota
    preemptible: bool
    reason: str

    @property
    def borrowed(self) -> bool:
        return self.borrowed_amount > 0


@dataclass(frozen=True, slots=True)
class Wait:
    tenant: str
    reason: WaitReason
    detail: str
    reclaim_needed: int = 0  # pool capacity a reclaim must free (only for RECLAIM_NEEDED)
    retry_at: float | None = None  # when waiting ends by itself (a new budget window)


@dataclass(frozen=True, slots=True)
class Reject:
    tenant: str
    reason: str


Verdict = Admit | Wait | Reject


def _not_yet_idle(
    ledger: Ledger, meter: Meter, asker: str, cohort: str, now: float
) -> tuple[int, float | None]:
    """Of the cohort's unused lendable quota, what its lenders used within their idle time (not
    lent yet), and the earliest time that can shrink."""
    held = 0
    falls: list[float] = []
    for member in ledger.book.cohort(cohort):
        if member.name == asker or member.lend_after_idle_s <= 0:
            continue
        used = ledger.used(member.name)
        peak = meter.idle_peak(member.name, now, ledger.leases(member.name))
        top = min(max(peak.amount, used), member.nominal)
        part = ledger.pool_share(member.name, top) - ledger.pool_share(
            member.name, min(used, member.nominal)
        )
        if part > 0:
            held += part
            if peak.falls_at is not None:
                falls.append(peak.falls_at)
    return held, (min(falls) if falls else None)


def decide(ledger: Ledger, ask: Ask, now: float, meter: Meter | None = None) -> Verdict:
    """The verdict on one ask (the rules in the module's order), each rule a step over one
    `AskState`."""
    quota = ledger.book.get(ask.tenant)
    if quota is None:
        return Reject(
            ask.tenant, f"tenant {ask.tenant!r} has no quota; known tenants: {ledger.book.names()}"
        )
    state = AskState.of(ledger, ask, quota, now, meter)
    rejected = never_fits(state)
    if rejected is not None:
        return rejected
    budget = budget_gate(state)
    if isinstance(budget, Wait):
        return budget
    wait = limits_gate(state) or borrow_gate(state) or cohort_gate(state)
    if wait is not None:
        return wait
    return admit(state, preemptible=budget)


@dataclass(frozen=True, slots=True)
class AskState:
    """One ask against its tenant's quota, with the tenant's usage as the ledger has it: what
    every step of `decide` reads (nothing in it changes while deciding)."""

    ledger: Ledger
    ask: Ask
    quota: TenantQuota
    now: float
    meter: Meter | None
    used: int  # what the tenant holds now
    after: int  # what it would hold once admitted
    over_after: int  # of `after`, the part above its nominal quota
    borrowed_amount: int  # of the ask, the part above its nominal quota

    @classmethod
    def of(
        cls, ledger: Ledger, ask: Ask, quota: TenantQuota, now: float, meter: Meter | None
    ) -> AskState:
        used = ledger.used(ask.tenant)
        after = used + ask.amount
        over_after = max(0, after - quota.nominal)
        borrowed = over_after - max(0, used - quota.nominal)
        return cls(ledger, ask, quota, now, meter, used, after, over_after, borrowed)

    @property
    def who(self) -> str:
        return f"tenant {self.ask.tenant!r}"

    def fmt(self, amount: int) -> str:
        return self.quota.resource.format(amount)


def never_fits(state: AskState) -> Reject | None:
    """Rule 1: a pod that could never be admitted (over nominal plus all it could ever borrow,
    over the compute limit, or a pod limit of 0)."""
    ask, quota, who, fmt = state.ask, state.quota, state.who, state.fmt
    others = sum(m.lendable for m in state.ledger.book.cohort(quota.cohort) if m.name != quota.name)
    ceiling = quota.nominal
    if not ask.exclusive and quota.cohort is not None:
        reach = others if quota.borrow_limit is None else min(others, quota.borrow_limit)
        ceiling += reach
    if ask.amount > ceiling:
        what = (
            "nominal quota (exclusive pods never borrow)"
            if ask.exclusive
            else ("nominal quota plus all it could borrow")
        )
        return Reject(
            ask.tenant,
            f"asks for {fmt(ask.amount)} but {who}'s {what} is {fmt(ceiling)}; "
            f"ask for less or raise the quota",
        )
    if quota.compute_limit_milli is not None and ask.compute_milli > quota.compute_limit_milli:
        return Reject(
            ask.tenant,
            f"asks for {ask.compute_milli}m of GPU compute but {who}'s compute limit is "
            f"{quota.compute_limit_milli}m",
        )
    if quota.max_pods == 0:
        return Reject(ask.tenant, f"{who} has a pod limit of 0")
    return None


def budget_gate(state: AskState) -> Wait | bool:
    """Rule 2: a spent budget (needs the meter) holds new work until the next window (Wait), or
    admits it only as preemptible (True); False: no budget is spent."""
    ask, quota, meter, now = state.ask, state.quota, state.meter, state.now
    if quota.budget is None or meter is None:
        return False
    spent = meter.window_usage(ask.tenant, now, state.ledger.leases(ask.tenant))
    if spent < quota.budget.limit:
        return False
    if not quota.budget.on_exhaustion.holds_new_work:
        return True
    nxt = quota.budget.window_start(quota.budget.window_of(now) + 1)
    return Wait(
        ask.tenant,
        WaitReason.BUDGET_EXHAUSTED,
        f"{state.who} has used {spent:.1f} of {quota.budget.limit:g} "
        f"{quota.resource.hour_unit} this window (on exhaustion: "
        f"{quota.budget.on_exhaustion.value}); the next "
        f"window starts in {max(0.0, nxt - now):.0f}s",
        retry_at=nxt,
    )


def limits_gate(state: AskState) -> Wait | None:
    """Rule 3: the pod and compute limits are hard; over them the pod waits."""
    ask, quota, ledger, who = state.ask, state.quota, state.ledger, state.who
    if quota.max_pods is not None and ledger.pods(ask.tenant) + 1 > quota.max_pods:
        return Wait(
            ask.tenant,
            WaitReason.POD_LIMIT,
            f"{who} runs {ledger.pods(ask.tenant)} of {quota.max_pods} pods",
        )
    compute = ledger.compute(ask.tenant)
    if (
        quota.compute_limit_milli is not None
        and compute + ask.compute_milli > quota.compute_limit_milli
    ):
        return Wait(
            ask.tenant,
            WaitReason.COMPUTE_LIMIT,
            f"{who} holds {compute}m of its {quota.compute_limit_milli}m compute limit; "
            f"this pod asks {ask.compute_milli}m",
        )
    return None


def borrow_gate(state: AskState) -> Wait | None:
    """Rule 5's limits on the borrower: over nominal, an exclusive pod never borrows, a tenant
    without a cohort cannot, and no tenant past its borrow limit."""
    if state.over_after <= 0:
        return None
    ask, quota, who, fmt, used = state.ask, state.quota, state.who, state.fmt, state.used
    if ask.exclusive:
        return Wait(
            ask.tenant,
            WaitReason.OVER_NOMINAL_EXCLUSIVE,
            f"{who} holds {fmt(used)} of its {fmt(quota.nominal)} nominal quota; this "
            f"exclusive pod asks {fmt(ask.amount)} and exclusive pods never borrow",
        )
    if quota.cohort is None:
        return Wait(
            ask.tenant,
            WaitReason.NO_COHORT,
            f"{who} holds {fmt(used)} of its {fmt(quota.nominal)} nominal quota and has no "
            f"cohort to borrow from",
        )
    if not quota.may_borrow(state.over_after):
        return Wait(
            ask.tenant,
            WaitReason.BORROW_LIMIT,
            f"{who} would borrow {fmt(state.over_after)}, over its borrow limit of "
            f"{fmt(quota.borrow_limit or 0)}",
        )
    return None


def cohort_gate(state: AskState) -> Wait | None:
    """Rules 4 and 5 on the cohort's pool: no room left to lend (a borrower waits), room held by
    borrowers (a tenant within nominal waits for reclaim), or room not idle long enough at its
    lenders (`lend_after_idle_s`, needs the meter)."""
    ask, quota, ledger, who, fmt = state.ask, state.quota, state.ledger, state.who, state.fmt
    if quota.cohort is None:
        return None
    short = (
        ledger.pool_used(quota.cohort)
        + ledger.pool_share(ask.tenant, state.after)
        - (ledger.pool_share(ask.tenant) + ledger.book.pool_capacity(quota.cohort))
    )
    if short > 0:
        if state.over_after > 0:
            return Wait(
                ask.tenant,
                WaitReason.COHORT_EXHAUSTED,
                f"cohort {quota.cohort!r} has {fmt(ledger.pool_free(quota.cohort))} unused "
                f"quota to lend; {who} needs {fmt(ask.amount)}",
            )
        return Wait(
            ask.tenant,
            WaitReason.RECLAIM_NEEDED,
            f"{who} is within its nominal quota but borrowers in cohort {quota.cohort!r} hold "
            f"{fmt(short)} of it",
            reclaim_needed=short,
        )
    if state.over_after > 0 and state.meter is not None:
        held, falls_at = _not_yet_idle(ledger, state.meter, quota.name, quota.cohort, state.now)
        if short + held > 0:
            wait_s = "" if falls_at is None else f"; it may be lent in {falls_at - state.now:.0f}s"
            return Wait(
                ask.tenant,
                WaitReason.LENDER_NOT_IDLE,
                f"cohort {quota.cohort!r} has {fmt(ledger.pool_free(quota.cohort))} unused "
                f"quota, but {fmt(held)} of it was in use within its lenders' idle time "
                f"before lending{wait_s}; {who} needs {fmt(ask.amount)}",
                retry_at=falls_at,
            )
    return None


def admit(state: AskState, *, preemptible: bool) -> Admit:
    """The ask passed every rule: admitted, borrowing what is above nominal."""
    quota, fmt = state.quota, state.fmt
    if state.borrowed_amount > 0:
        reason = f"borrows {fmt(state.borrowed_amount)} from cohort {quota.cohort!r}"
    else:
        reason = f"within nominal quota ({fmt(state.after)} of {fmt(quota.nominal)})"
    if preemptible:
        reason += "; budget spent, admitted as preemptible"
    return Admit(state.ask.tenant, state.ask.amount, state.borrowed_amount, preemptible, reason)
