"""Admission's card sizes: when a round reads the very Node and GpuNode lists of the last round
(the watch cache's kinds did not change) and nothing is set aside, it makes no pass over the
nodes; a changed list is read again."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fake_cluster import FakeCluster, pod_json, quota_json
from support.builders import node_json

from gpupool.controllers.admission.reconcile import AdmissionReconciler
from gpupool.state.listed import Listed
from gpupool.state.nodes import NodeObject

NOW = 1_767_225_600.0


class KeptReads(FakeCluster):
    """Hands the same Node list while `changed` is not set, as the adapter does per generation."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.kept: Listed[NodeObject] | None = None
        self.changed = False

    async def nodes(self) -> Listed[NodeObject]:
        if self.kept is None or self.changed:
            self.kept, self.changed = await super().nodes(), False
        return self.kept


def test_unchanged_reads_make_no_pass_over_the_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    passes: list[int] = []
    cluster = KeptReads(
        pods=[pod_json("p", "alpha", 12, gated=True, created=NOW - 60)],
        quotas=[quota_json("alpha", 80)],
        nodes=[node_json("n1", cards=2)],
    )
    admission = AdmissionReconciler(cluster, lambda: NOW)
    real = admission._cards  # the pass over every Node and GpuNode

    def counted(*args: Any) -> Any:
        passes.append(1)
        return real(*args)

    monkeypatch.setattr(admission, "_cards", counted)
    first = asyncio.run(admission.reconcile())
    assert [a.pod.name for a in first.plan.admit] == ["p"] and passes == [1]
    # FakeCluster's GpuNode list is a new object each read: kept only when both are the same
    kept = cluster.gpu_nodes

    async def same_gpunodes(names: Any = None) -> Any:
        if not hasattr(same_gpunodes, "listed"):
            same_gpunodes.listed = await kept(names)  # type: ignore[attr-defined]
        return same_gpunodes.listed  # type: ignore[attr-defined]

    monkeypatch.setattr(cluster, "gpu_nodes", same_gpunodes)
    asyncio.run(admission.reconcile())
    asyncio.run(admission.reconcile())
    assert passes == [1, 1]  # one pass over the new GpuNode list, then none
    cluster.changed = True
    cluster.node_objects["n2"] = node_json("n2", cards=4)
    asyncio.run(admission.reconcile())
    assert len(passes) == 3  # a changed Node list is read again
