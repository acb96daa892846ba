"""A node measure that counts a restricted shape only on nodes whose models it accepts.

FGD counts all of a node's free share as fragment for every shape the node cannot host,
including a shape restricted to other models. On a cluster where a third of the tasks are
restricted, that makes the cards of a rare model look like fragments to the many tasks
restricted to the common one, so FGD fills the rare models first with unrestricted tasks, and
the tasks that can run only there are refused while the common model still has room. A free card
is a fragment for a task only if that task could have used it: here a shape restricted to a model
set S is measured only on nodes with a card of S (with FGD's terms there), and elsewhere counts
nothing; the demand those tasks put on their own models is priced by reserve.py instead.
Unrestricted and CPU-only shapes are measured as before, so on an unrestricted workload this is
exactly the wrapped measure.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gpupool.placement.fragmentation import FloatArray, NodeMeasure
from gpupool.placement.rows import kinds
from gpupool.placement.snapshot import BoolArray, ClusterSnapshot, IntArray
from gpupool.placement.workload import TargetWorkload

MeasureFactory = Callable[[ClusterSnapshot, TargetWorkload], NodeMeasure]


class AcceptingMeasure:
    def __init__(
        self, snap: ClusterSnapshot, workload: TargetWorkload, make: MeasureFactory
    ) -> None:
        by_set: dict[tuple[str, ...], list[int]] = {}
        for k, shape in enumerate(workload.shapes):
            by_set.setdefault(shape.models, []).append(k)
        self.parts: list[tuple[BoolArray | None, NodeMeasure]] = []
        for models, members in sorted(by_set.items()):
            sub = TargetWorkload(
                tuple(workload.shapes[k] for k in members),
                tuple(workload.weights[k] for k in members),
                tuple(workload.memory_of(k) for k in members),
            )
            accepts = None
            if models:
                ids = [snap.model_ids[m] for m in models if m in snap.model_ids]
                accepts = np.asarray(
                    (snap.present & np.isin(snap.model_id, ids)).any(axis=1), dtype=bool
                )
            self.parts.append((accepts, make(snap, sub)))
        tells = [m.node_kind for _, m in self.parts] + [a for a, _ in self.parts if a is not None]
        self.node_kind = kinds(*tells) if tells else np.zeros(len(snap), dtype=np.int64)

    def node_frag(
        self,
        rows: IntArray,
        cpu_free: IntArray,
        share_free: IntArray,
        mem_free: IntArray | None = None,
    ) -> FloatArray:
        if len(self.parts) == 1 and self.parts[0][0] is None:  # no restricted shapes
            return self.parts[0][1].node_frag(rows, cpu_free, share_free, mem_free)
        frag = np.zeros(len(rows))
        for accepts, measure in self.parts:
            if accepts is None:
                frag += measure.node_frag(rows, cpu_free, share_free, mem_free)
                continue
            mine = np.flatnonzero(accepts[rows])
            if len(mine):
                mem = None if mem_free is None else mem_free[mine]
                frag[mine] += measure.node_frag(rows[mine], cpu_free[mine], share_free[mine], mem)
        return frag
