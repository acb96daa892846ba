"""The extender's requeue: pods filter refused on every node are annotated once a node takes them,
so kube-scheduler retries them (a lease release is no event it watches)."""

from __future__ import annotations

import asyncio
from typing import Any

from support.builders import node_json, pod_json

from gpupool.adapters.extender_http.service import Extender
from gpupool.adapters.extender_http.wire import ExtenderArgs
from gpupool.adapters.kubernetes.node import read_node
from gpupool.adapters.wire.names import ANN_REQUEUE
from gpupool.domain.allocations import Slice
from gpupool.domain.units import GiB
from gpupool.state.cluster import ClusterCache
from gpupool.state.lease import LeaseRecord, PodRef


def _lease(name: str, size: int) -> LeaseRecord:
    return LeaseRecord(
        name=name,
        namespace="t",
        tenant="t",
        pod=PodRef("t", name, name),
        node="n",
        slices=(Slice(0, "GPU-n-0", "A100-80GB", 0, size, 0),),
        amount=size,
    )


def _pod(name: str, gib: int) -> dict[str, Any]:
    return pod_json(name, namespace="t", uid=f"uid-{name}", gpu_memory=f"{gib}Gi", vgpu=1)


class Api:
    def __init__(self) -> None:
        self.annotated: list[tuple[str, str, dict[str, str]]] = []

    async def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        self.annotated.append((namespace, name, annotations))


def _setup() -> tuple[ClusterCache, Extender, Api]:
    cache = ClusterCache()
    cache.rebuild([read_node(n) for n in [node_json("n", cards=1)]], [], [_lease("held", 60 * GiB)])
    api = Api()
    return cache, Extender(cache, api, policy="binpack"), api  # type: ignore[arg-type]


def _filter(ext: Extender, pod: dict[str, Any]) -> tuple[str, ...] | None:
    return ext.filter(ExtenderArgs.from_json({"Pod": pod, "NodeNames": ["n"]})).node_names


def test_a_refused_pod_is_requeued_once_when_a_release_makes_room() -> None:
    cache, ext, api = _setup()
    assert _filter(ext, _pod("big", 40)) is None
    assert _filter(ext, _pod("small", 8)) == ("n",)
    assert ext.refused_that_fit() == []  # nothing changed that makes room
    cache.delete_lease("t/held")
    assert asyncio.run(ext.requeue_refused()) == 1
    assert [(ns, name, list(a)) for ns, name, a in api.annotated] == [("t", "big", [ANN_REQUEUE])]
    cache.set_lease(_lease("other", 1 * GiB))
    assert ext.refused_that_fit() == []  # nudged once; filter notes it again if it refuses


def test_a_pod_that_still_does_not_fit_stays_refused_until_it_does() -> None:
    cache, ext, _ = _setup()
    assert _filter(ext, _pod("big", 40)) is None
    cache.set_lease(_lease("more", 4 * GiB))  # a change, but no room
    assert asyncio.run(ext.requeue_refused()) == 0
    cache.delete_lease("t/more")
    cache.delete_lease("t/held")
    assert [p.name for p in ext.refused_that_fit()] == ["big"]


def test_a_pod_that_passes_filter_later_is_forgotten() -> None:
    cache, ext, _ = _setup()
    assert _filter(ext, _pod("big", 40)) is None
    cache.delete_lease("t/held")
    assert _filter(ext, _pod("big", 40)) == ("n",)
    assert ext.refused_that_fit() == []
