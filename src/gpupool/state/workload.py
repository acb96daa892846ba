"""A Deployment or StatefulSet the autoscaler looks after, as the controller sees it: decoded
once from its JSON at the edge (`adapters.kubernetes.workload`), then read by the plan.

`policy` is its autoscale annotations read into a `ScalePolicy`, or the message of what is wrong
with them (`problem`); `record` is what the controller last wrote on it (`gpupool.io/autoscale-
status`): the last step, kept on the object so that a restarted controller keeps the cooldown,
and the last problem it reported, so that a report is made once and not every round.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpupool.placement.autoscale import LastStep, ScalePolicy
from gpupool.state.pods import Expression, matches_expression

KINDS = ("Deployment", "StatefulSet")


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """`spec.selector`: every matchLabels pair and every matchExpressions requirement."""

    match_labels: tuple[tuple[str, str], ...] = ()
    expressions: tuple[Expression, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if not self.match_labels and not self.expressions:
            return False  # an empty selector selects nothing for a workload (the API refuses it)
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            matches_expression(e, labels) for e in self.expressions
        )


@dataclass(frozen=True, slots=True)
class AutoscaleRecord:
    last: LastStep | None = None
    reported: str | None = None  # the problem last reported on the object (an event)


@dataclass(frozen=True, slots=True)
class ScalableWorkload:
    kind: str  # Deployment | StatefulSet
    namespace: str
    name: str
    uid: str
    replicas: int  # spec.replicas
    selector: LabelSelector
    policy: ScalePolicy | None
    problem: str | None  # why the annotations could not be read (policy is None then)
    record: AutoscaleRecord = AutoscaleRecord()

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """A pod of this workload: in its namespace, matching its selector."""
        return namespace == self.namespace and self.selector.matches(labels)
