"""An in-memory `ports.WorkloadApi` (Deployments and StatefulSets, their scale subresource,
annotations, events) and a `ports.UtilisationSource` that answers what a test sets, for the
autoscaler's reconciler tests. Every write is recorded in order in `writes`."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from gpupool.adapters.kubernetes.decoded import workloads_listed
from gpupool.ports import Json, PodPlace
from gpupool.state.listed import Listed, ObjectReference
from gpupool.state.workload import ScalableWorkload


class FakeWorkloads:
    def __init__(self, workloads: Sequence[tuple[str, Json]] = ()) -> None:
        self.objects = {self._key(k, o): (k, copy.deepcopy(o)) for k, o in workloads}
        self.writes: list[tuple[str, str, Any]] = []
        self.events: list[tuple[str, str, str, bool]] = []  # (key, reason, message, warning)

    @staticmethod
    def _key(kind: str, obj: Mapping[str, Any]) -> str:
        meta = obj["metadata"]
        return f"{kind}/{meta['namespace']}/{meta['name']}"

    def get(self, kind: str, namespace: str, name: str) -> Json:
        return self.objects[f"{kind}/{namespace}/{name}"][1]

    async def workloads(self) -> Listed[ScalableWorkload]:
        """Decoded as the adapter decodes them (`decoded.workloads_listed`)."""
        kinds = [
            workloads_listed(
                kind, [copy.deepcopy(o) for k, o in self.objects.values() if k == kind]
            )
            for kind in ("Deployment", "StatefulSet")
        ]
        return Listed(kinds[0].read + kinds[1].read, kinds[0].unreadable + kinds[1].unreadable)

    async def scale(self, kind: str, namespace: str, name: str, replicas: int) -> bool:
        key = f"{kind}/{namespace}/{name}"
        self.writes.append(("scale", key, replicas))
        if key not in self.objects:
            return False
        self.objects[key][1].setdefault("spec", {})["replicas"] = replicas
        return True

    async def annotate(self, kind: str, namespace: str, name: str, key: str, value: str) -> bool:
        where = f"{kind}/{namespace}/{name}"
        self.writes.append(("annotate", where, (key, value)))
        if where not in self.objects:
            return False
        meta = self.objects[where][1].setdefault("metadata", {})
        meta.setdefault("annotations", {})[key] = value
        return True

    async def workload_event(
        self,
        about: ObjectReference,
        reason: str,
        message: str,
        *,
        warning: bool = False,
        now_rfc3339: str,
    ) -> None:
        key = f"{about.kind}/{about.namespace}/{about.name}"
        self.writes.append(("event", key, reason))
        self.events.append((key, reason, message, warning))


class SetUtilisation:
    """Answers `pct` for every pod it is asked about (None: no figures); records the asks."""

    def __init__(self, pct: float | None) -> None:
        self.pct = pct
        self.asked: list[tuple[str, ...]] = []

    async def pod_utilisation(self, pods: Sequence[PodPlace]) -> Mapping[str, float]:
        self.asked.append(tuple(p.key for p in pods))
        return {} if self.pct is None else {p.key: self.pct for p in pods}
