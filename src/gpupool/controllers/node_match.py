"""Which nodes a pod may run on, by its own constraints (pure): `spec.nodeSelector`, the required
node affinity (`requiredDuringSchedulingIgnoredDuringExecution`: any term, all of a term's
`matchExpressions` on labels and `matchFields` on `metadata.name`) and taints it does not
tolerate (NoSchedule, NoExecute). kube-scheduler asks these before the extender sees a node;
reclaim for room asks them so that it never evicts on a node the waiting pod could not use.
Preferred affinity, pod (anti-)affinity and topology spread are not asked (they do not exclude a
node outright, or depend on other pods).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Expression = tuple[str, str, tuple[str, ...]]  # key, operator, values
Term = tuple[tuple[Expression, ...], tuple[Expression, ...]]  # matchExpressions, matchFields
Toleration = tuple[str, str, str, str]  # key, operator, value, effect ("" = any)

_EXCLUDING = ("NoSchedule", "NoExecute")


def _expressions(items: object) -> tuple[Expression, ...]:
    out: list[Expression] = []
    for item in items if isinstance(items, Sequence) else ():
        if isinstance(item, Mapping):
            values = item.get("values") or ()
            out.append(
                (
                    str(item.get("key") or ""),
                    str(item.get("operator") or ""),
                    tuple(str(v) for v in values) if isinstance(values, Sequence) else (),
                )
            )
    return tuple(out)


def _matches(expression: Expression, labels: Mapping[str, str]) -> bool:
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


def _tolerates(toleration: Toleration, taint: Mapping[str, Any]) -> bool:
    key, op, value, effect = toleration
    if effect and effect != taint.get("effect"):
        return False
    if op == "Exists":
        return not key or key == taint.get("key")
    return key == taint.get("key") and value == str(taint.get("value") or "")


@dataclass(frozen=True, slots=True)
class NodeConstraints:
    selector: tuple[tuple[str, str], ...] = ()
    terms: tuple[Term, ...] = ()  # any of them (none: no required affinity)
    tolerations: tuple[Toleration, ...] = ()

    @classmethod
    def of_spec(cls, spec: Mapping[str, Any]) -> NodeConstraints:
        selector = spec.get("nodeSelector") or {}
        affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        ) or {}
        terms = tuple(
            (_expressions(t.get("matchExpressions")), _expressions(t.get("matchFields")))
            for t in affinity.get("nodeSelectorTerms") or ()
            if isinstance(t, Mapping)
        )
        tolerations = tuple(
            (
                str(t.get("key") or ""),
                str(t.get("operator") or "Equal"),
                str(t.get("value") or ""),
                str(t.get("effect") or ""),
            )
            for t in spec.get("tolerations") or ()
            if isinstance(t, Mapping)
        )
        pairs = tuple(sorted((str(k), str(v)) for k, v in selector.items()))
        return cls(pairs, terms, tolerations)

    def allows(self, node: Mapping[str, Any]) -> bool:
        """Whether a pod with these constraints may be placed on `node` (a Node object)."""
        meta = node.get("metadata") or {}
        labels: Mapping[str, str] = meta.get("labels") or {}
        if any(labels.get(k) != v for k, v in self.selector):
            return False
        fields = {"metadata.name": str(meta.get("name") or "")}
        if self.terms and not any(
            (exprs or fieldexprs)
            and all(_matches(e, labels) for e in exprs)
            and all(_matches(e, fields) for e in fieldexprs)
            for exprs, fieldexprs in self.terms
        ):
            return False
        for taint in (node.get("spec") or {}).get("taints") or ():
            if not isinstance(taint, Mapping) or taint.get("effect") not in _EXCLUDING:
                continue
            if not any(_tolerates(t, taint) for t in self.tolerations):
                return False
        return True
