"""The controller's ClusterApi over the watch cache: a whole kind is decoded again only when its
store changed (the same `Listed` while nothing did), and reads by key look up only those keys."""

from __future__ import annotations

import asyncio
from typing import cast

from fake_cluster import gpu_node_json, node_lease_json
from lightkube import AsyncClient

from gpupool.adapters.cluster import KubeClusterApi
from gpupool.adapters.kubernetes.watch_cache import (
    CONTROLLER_KINDS,
    WatchCache,
)
from gpupool.state.objects import Event


def _api() -> tuple[KubeClusterApi, WatchCache]:
    cache = WatchCache(cast(AsyncClient, object()), CONTROLLER_KINDS)  # no watch runs here
    for reflector in cache.reflectors.values():
        reflector.synced.set()
    nodes = []
    for i, name in enumerate(("n1", "n2", "n3")):
        node = gpu_node_json(name)
        node["metadata"] |= {"uid": f"u{i}", "resourceVersion": "1"}
        nodes.append(node)
    cache.stores["gpunodes"].replace(nodes)
    cache.stores["node-leases"].replace(
        [node_lease_json(n, renewed=1_000.0 + i) for i, n in enumerate(("n1", "n2", "n3"))]
    )
    return KubeClusterApi(cast(AsyncClient, object()), cache=cache), cache


def test_a_kind_that_did_not_change_is_not_decoded_again() -> None:
    api, cache = _api()
    first = asyncio.run(api.gpu_nodes())
    assert sorted(n.name for n in first.values) == ["n1", "n2", "n3"]
    assert asyncio.run(api.gpu_nodes()) is first  # nothing changed: the same decoded list
    changed = gpu_node_json("n4")
    changed["metadata"] |= {"uid": "u4", "resourceVersion": "2"}
    cache.stores["gpunodes"].apply(Event.ADDED, changed)
    after = asyncio.run(api.gpu_nodes())
    assert after is not first and sorted(n.name for n in after.values) == ["n1", "n2", "n3", "n4"]


def test_reads_by_key_look_up_only_those_keys() -> None:
    api, _ = _api()
    some = asyncio.run(api.gpu_nodes({"n2", "missing"}))
    assert [n.name for n in some.values] == ["n2"]
    assert asyncio.run(api.node_renewals({"n3"})) == {"n3": 1_002.0}
