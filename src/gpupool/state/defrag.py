"""What defragmentation needs to know about the live pods, pure: which PodDisruptionBudget
covers each pod and how many disruptions it allows now, the slices the planner may move
(`Resident`s), and the common request sizes fragmentation is measured against.

The controller's defragmentation loop and `gpupool defrag plan` on a live cluster both build the
planner's input here, from the same decoded values (`PodView`, the placement of each lease on the
extender's snapshot), so the dry run shows exactly what the loop would do.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpupool.domain.requests import Request
from gpupool.placement.defrag import Resident
from gpupool.placement.fragmentation import CommonSizes
from gpupool.placement.snapshot import Decision
from gpupool.state.pods import Expression, PodView, matches_expression

# The common sizes come from this many of the latest GPU requests (placed or waiting): the large
# requests that fragmentation keeps waiting are the ones that must count (as in the replay).
RECENT_REQUESTS = 1000


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    """A PodDisruptionBudget (policy/v1): its selector and `status.disruptionsAllowed`.
    `selector` None: the budget selects no pod (policy/v1's null selector); an empty one
    selects every pod of its namespace."""

    namespace: str
    name: str
    allowed: int
    match_labels: tuple[tuple[str, str], ...] | None = ()
    expressions: tuple[Expression, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def covers(self, pod: PodView) -> bool:
        if pod.namespace != self.namespace or self.match_labels is None:
            return False
        labels = pod.labels
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            matches_expression(e, labels) for e in self.expressions
        )


def budget_of(pod: PodView, budgets: Sequence[DisruptionBudget]) -> DisruptionBudget | None:
    """The budget covering the pod (the first by name when several do: the Eviction API then
    refuses the eviction anyway, which the loop handles as any refusal)."""
    covering = sorted((b for b in budgets if b.covers(pod)), key=lambda b: b.name)
    return covering[0] if covering else None


def movable(pod: PodView) -> bool:
    """A running GPU pod that no notice already claims (reclaim, lease expiry, budget drain,
    defragmentation), that is not on its way out, and that is not a gang member (a gang is
    placed whole: moving one member alone would split it)."""
    return (
        pod.node is not None
        and not pod.terminal
        and not pod.deleting
        and pod.request is not None
        and pod.reclaim_notice is None
        and pod.expiry_notice is None
        and pod.drain_notice is None
        and pod.defrag_notice is None
        and pod.gang is None
    )


def residents_of(
    pods: Iterable[PodView],
    decisions: Mapping[str, Decision],
    budgets: Sequence[DisruptionBudget],
    *,
    skip_nodes: Collection[str] = (),
) -> tuple[list[Resident], dict[str, int]]:
    """The planner's residents (id: the pod's namespace/name) and the disruptions each budget
    allows now. `decisions`: each lease's placement, keyed by its pod's uid; a slice whose pod
    is not movable (or not listed) is left out, so the planner never clears its card whole.
    `skip_nodes`: nodes whose slices must stay (room is being held there)."""
    out: list[Resident] = []
    for pod in sorted(pods, key=lambda p: p.key):
        decision = decisions.get(pod.uid)
        if decision is None or not movable(pod) or decision.node in skip_nodes:
            continue
        assert pod.request is not None
        budget = budget_of(pod, budgets)
        out.append(
            Resident(
                id=pod.key,
                decision=decision,
                priority=pod.priority,
                exclusive=pod.request.exclusive,
                has_owner=pod.has_owner,
                disruption_budget=budget.key if budget is not None else None,
            )
        )
    return out, {b.key: max(0, b.allowed) for b in budgets}


def common_sizes(pods: Iterable[PodView]) -> CommonSizes:
    """The sizes learnt from the latest GPU requests of pods not finished (placed or waiting)."""
    live = sorted(
        (p for p in pods if p.request is not None and p.request.wants_gpu and not p.terminal),
        key=lambda p: (p.submitted_at, p.key),
    )
    recent: list[Request] = [p.request for p in live[-RECENT_REQUESTS:] if p.request is not None]
    return CommonSizes.learn(recent)
