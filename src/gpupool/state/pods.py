"""A pod as gpupool sees it (`PodView`): decoded once from its JSON at the edge
(`adapters.kubernetes.pod_view.read_pod`, remembered per uid and resourceVersion in
`adapters.kubernetes.decoded`), then read by every plan of the controllers and by the extender
(whose `ScheduledPod` is this value seen through the extender's eyes); nothing further in parses
its annotations again.

`NodeConstraints` says which nodes a pod may run on by its own spec: `nodeSelector`, the required
node affinity (`requiredDuringSchedulingIgnoredDuringExecution`: any term, all of a term's
`matchExpressions` on labels and `matchFields` on `metadata.name`) and taints it does not
tolerate (NoSchedule, NoExecute). kube-scheduler asks these before the extender sees a node;
reclaim for room asks them so that it never evicts on a node the waiting pod could not use.
Preferred affinity, pod (anti-)affinity and topology spread are not asked (they do not exclude a
node outright, or depend on other pods); `preferences` only says whether the spec has any such
soft preference, and `avoids` whether a node has a PreferNoSchedule taint the pod does not
tolerate: where either counts, the extender's filter leaves the choice among the nodes that fit
to kube-scheduler's scoring (adapters/extender_http/filter_pick.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpupool.domain.allocations import Slice
from gpupool.domain.compute_modes import WorkloadClass
from gpupool.domain.gang import GangMark
from gpupool.domain.requests import Request
from gpupool.state.admitted import Admitted
from gpupool.state.claim_ask import ClaimAsk
from gpupool.state.nodes import PREFER_NO_SCHEDULE, NodeObject, Taint
from gpupool.state.notice import ReclaimNotice

TERMINAL_PHASES = ("Succeeded", "Failed")

Expression = tuple[str, str, tuple[str, ...]]  # key, operator, values
Term = tuple[tuple[Expression, ...], tuple[Expression, ...]]  # matchExpressions, matchFields
Toleration = tuple[str, str, str, str]  # key, operator, value, effect ("" = any)

_EXCLUDING = ("NoSchedule", "NoExecute")


def matches_expression(expression: Expression, labels: Mapping[str, str]) -> bool:
    """One selector requirement (In, NotIn, Exists, DoesNotExist, Gt, Lt) over `labels`."""
    key, op, values = expression
    present = key in labels
    value = labels.get(key)
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(values) == 1:
        try:
            have, bound = int(str(value)), int(values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def _tolerates(toleration: Toleration, taint: Taint) -> bool:
    key, op, value, effect = toleration
    if effect and effect != taint.effect:
        return False
    if op == "Exists":
        return not key or key == taint.key
    return key == taint.key and value == taint.value


@dataclass(frozen=True, slots=True)
class NodeConstraints:
    selector: tuple[tuple[str, str], ...] = ()
    terms: tuple[Term, ...] = ()  # any of them (none: no required affinity)
    tolerations: tuple[Toleration, ...] = ()
    # the spec asks kube-scheduler's scoring for something: preferred node affinity, preferred
    # pod (anti-)affinity, or a topology spread that is only scored (ScheduleAnyway)
    preferences: bool = False

    def avoids(self, node: NodeObject) -> bool:
        """Whether `node` has a PreferNoSchedule taint the pod does not tolerate (kube-scheduler
        scores such a node down rather than refusing it)."""
        return any(
            taint.effect == PREFER_NO_SCHEDULE
            and not any(_tolerates(t, taint) for t in self.tolerations)
            for taint in node.taints
        )

    def allows(self, node: NodeObject) -> bool:
        """Whether a pod with these constraints may be placed on `node`."""
        return self.refusal(node) is None

    def refusal(self, node: NodeObject) -> str | None:
        """Why a pod with these constraints may not be placed on `node` (the first constraint
        it breaks, in words), or None when it may."""
        labels = node.labels
        for key, value in self.selector:
            if labels.get(key) != value:
                have = f"has {key}={labels[key]}" if key in labels else f"has no label {key}"
                return f"the pod's nodeSelector asks for {key}={value}; node {node.name} {have}"
        fields = {"metadata.name": node.name}
        if self.terms and not any(
            (exprs or fieldexprs)
            and all(matches_expression(e, labels) for e in exprs)
            and all(matches_expression(e, fields) for e in fieldexprs)
            for exprs, fieldexprs in self.terms
        ):
            return f"node {node.name} matches none of the pod's required node affinity terms"
        for taint in node.taints:
            if taint.effect not in _EXCLUDING:
                continue
            if not any(_tolerates(t, taint) for t in self.tolerations):
                value = f"={taint.value}" if taint.value else ""
                return (
                    f"node {node.name} has the taint {taint.key}{value}:{taint.effect}, which "
                    f"the pod does not tolerate"
                )
        return None


@dataclass(frozen=True, slots=True)
class PodView:
    namespace: str
    name: str
    uid: str
    tenant: str
    priority: int
    submitted_at: float  # the webhook's queued-at stamp, else the creation time
    request: Request | None  # None: asks for no GPU
    problem: str | None  # the request could not be read (the pod predates a rule, or was edited)
    gated: bool  # still carries the gpupool.io/quota scheduling gate
    gate_index: int  # its position in spec.schedulingGates (-1 when not gated)
    phase: str
    deleting: bool
    node: str | None
    admitted: Admitted | None
    queue_note: str | None  # the current gpupool.io/queue annotation
    allocation_models: tuple[str, ...] = ()
    # `gpupool.io/allocation` as the extender's bind wrote it: the slices the pod holds on its
    # node (() without one); `allocation_problem` says why it could not be read
    allocation: tuple[Slice, ...] = ()
    allocation_problem: str | None = None
    reclaim_notice: ReclaimNotice | None = None
    # kube-scheduler found no node for it: condition PodScheduled=False, reason Unschedulable
    unschedulable: bool = False
    # when it was bound (condition PodScheduled=True's lastTransitionTime); None: not known
    bound_at: float | None = None
    # which nodes it may run on by its spec (nodeSelector, required node affinity, tolerations)
    constraints: NodeConstraints = field(default_factory=NodeConstraints)
    # the lease's terms: its own TTL (gpupool.io/lease-ttl; None: none, or unreadable), the
    # tenant's last renewal (gpupool.io/renew), the notice given when its lease expired
    lease_ttl_s: float | None = None
    renewal: str | None = None
    expiry_notice: ReclaimNotice | None = None
    # the notice given when its tenant's budget ran out under `onExhaustion: drain`
    drain_notice: ReclaimNotice | None = None
    # its gang (gpupool.io/gang, gang-size): admitted, placed and reclaimed with the others
    gang: GangMark | None = None
    # what defragmentation needs: the pod's labels (PodDisruptionBudget selectors), whether a
    # controller owns it (ownerReferences with controller: true, so an eviction is a move), and
    # the notice given when a defragmentation round moves it (gpupool.io/defrag-notice)
    labels: Mapping[str, str] = field(default_factory=dict)
    has_owner: bool = False
    defrag_notice: ReclaimNotice | None = None
    # what the extender's bind reads besides the request (validated with it: `problem` says
    # why any is wrong): gpupool.io/placement-policy (None: the default), gpupool.io/compute-mode
    # (mps | none; None: the class default) and gpupool.io/workload (the lease's class)
    placement_policy: str | None = None
    compute_mode: str | None = None
    workload: WorkloadClass = WorkloadClass.INFERENCE
    # a DRA claim pod (gpupool.io/claim, no gpupool resources): `request` is its claim's ask,
    # which the claim allocator places; the extender's filter and bind take no such pod
    claim_pod: bool = False
    # a claim pod's ask as the webhook wrote it (None: not a claim pod, or the ask is unreadable:
    # `problem` says why), and the ResourceClaim its claim entry names once it is made
    # (`spec.resourceClaims[].resourceClaimName`, or `status.resourceClaimStatuses` for a
    # template's claim; None while it is not made)
    claim_ask: ClaimAsk | None = None
    claim_name: str | None = None
    # metadata.annotations is there: a JSON patch adds an annotation to it, else adds the map
    annotated: bool = True

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def holds_quota(self) -> bool:
        """An admitted GPU pod that has not finished: it counts against its tenant's quota
        (a pod being deleted counts until it is gone: its GPU may still be in use)."""
        return not self.gated and not self.terminal and self.request is not None
