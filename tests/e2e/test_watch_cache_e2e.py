"""The watch cache on a real API server: it lists once and follows a watch; a watch that stopped
is resumed from its last version and a watch whose version is gone (410) lists again — in both
cases every change made meanwhile reaches the store and the subscribers, none is lost. The
extender's informer, on the same stream, likewise: its GpuLease watch resumed from its last
version sees every change made while it was stopped, and a version gone is its Gone."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import httpx2 as httpx
import pytest
from conftest import E2ECluster
from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap
from lightkube.types import PatchType
from support.waiting import wait_until_async

from gpupool.adapters.extender_http.informer import Informer
from gpupool.adapters.kubeclient import async_client
from gpupool.adapters.kubernetes.crds import apply_crds
from gpupool.adapters.kubernetes.resources import GpuLease
from gpupool.adapters.kubernetes.watch_cache import GPULEASES, Gone, WatchCache, Watched
from gpupool.state.cluster import ClusterCache
from gpupool.state.objects import Change

BOUND = 30.0  # a hang guard


class Counts:
    def __init__(self) -> None:
        self.restarts = 0
        self.relists = 0
        self.size = 0

    def cache_size(self, kind: str, objects: int) -> None:
        self.size = objects

    def watch_restarted(self, kind: str) -> None:
        self.restarts += 1

    def relisted(self, kind: str) -> None:
        self.relists += 1


def _data(cache: WatchCache, ns: str) -> dict[str, Any]:
    return {
        str(o["metadata"]["name"]): (o.get("data") or {}).get("v")
        for o in cache.stores["cms"].values()
        if o["metadata"]["namespace"] == ns
    }


async def _put(client: AsyncClient, ns: str, name: str, value: str, label: str) -> None:
    cm = ConfigMap(metadata=ObjectMeta(name=name, namespace=ns, labels={"watch-e2e": label}))
    cm.data = {"v": value}
    await client.create(cm)


def _compact(cluster: E2ECluster) -> None:
    """Compact etcd's history up to now (its v3 JSON gateway on the dev cluster's loopback)."""
    base = f"http://127.0.0.1:{cluster.state.ports['etcd']}/v3/kv"
    header = httpx.post(f"{base}/range", json={"key": "AA=="}).json()["header"]
    revision = int(header["revision"])
    answer = httpx.post(f"{base}/compaction", json={"revision": revision, "physical": True})
    answer.raise_for_status()


async def _scenario(cluster: E2ECluster, ns: str) -> None:
    client = async_client(cluster.kubeconfig)
    counts = Counts()
    watched = Watched("cms", ConfigMap, True, {"watch-e2e": ns})
    cache = WatchCache(client, [watched], observer=counts)
    heard: list[Change] = []
    cache.subscribe(heard.append)
    stop = asyncio.Event()
    try:
        await _put(client, ns, "a", "1", ns)
        run = asyncio.ensure_future(cache.run(stop))
        await wait_until_async(lambda: _data(cache, ns) == {"a": "1"}, BOUND, "the first list")
        await _put(client, ns, "b", "1", ns)
        await wait_until_async(lambda: "b" in _data(cache, ns), BOUND, "b from the watch")
        assert counts.relists == 0 and counts.size == 2

        # The watch stops (the process's task ends); changes land meanwhile; resumed from
        # its last version, it sees each of them without listing again.
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
        heard.clear()
        await client.patch(ConfigMap, "a", {"data": {"v": "2"}}, namespace=ns)
        await client.delete(ConfigMap, "b", namespace=ns)
        await _put(client, ns, "c", "1", ns)
        run = asyncio.ensure_future(cache.run(stop))
        await wait_until_async(
            lambda: _data(cache, ns) == {"a": "2", "c": "1"}, BOUND, "the changes while stopped"
        )
        assert counts.relists == 0
        assert {(c.key, c.new is None) for c in heard} == {
            (f"{ns}/a", False), (f"{ns}/b", True), (f"{ns}/c", False)
        }  # fmt: skip

        # Stopped again, and this time its version is one the API server no longer serves
        # (410 Gone): it lists again, and the changes reach the subscribers all the same.
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
        heard.clear()
        await client.patch(ConfigMap, "c", {"data": {"v": "3"}}, namespace=ns)
        await client.delete(ConfigMap, "a", namespace=ns)
        _compact(cluster)  # etcd forgets its history,
        cache.reflectors["cms"].version = "1"  # and the watch asks for a version in it
        run = asyncio.ensure_future(cache.run(stop))
        await wait_until_async(lambda: _data(cache, ns) == {"c": "3"}, BOUND, "the relist")
        assert counts.relists == 1
        assert {(c.key, c.new is None) for c in heard} == {(f"{ns}/c", False), (f"{ns}/a", True)}
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
    finally:
        stop.set()
        await client.close()


def test_a_watch_that_stops_or_whose_version_is_gone_loses_no_change(
    dev_cluster: E2ECluster, namespace: str
) -> None:
    asyncio.run(_scenario(dev_cluster, namespace))


def _lease(ns: str, name: str) -> GpuLease:
    """A GpuLease of a pod that does not exist, on a node the cache does not know."""
    device = {"uuid": "GPU-e2e", "index": 0, "model": "A100", "offsetBytes": 0,
              "sizeBytes": 1 << 30, "computePercent": 10}  # fmt: skip
    spec = {"tenant": ns, "podRef": {"namespace": ns, "name": name, "uid": f"uid-{name}"},
            "node": "node-e2e", "devices": [device], "resource": "gpu-memory",
            "amount": 1 << 30, "amountDisplay": "1Gi"}  # fmt: skip
    body = {"apiVersion": "gpupool.io/v1alpha1", "kind": "GpuLease",
            "metadata": {"name": name, "namespace": ns}, "spec": spec}  # fmt: skip
    return cast(GpuLease, GpuLease.from_dict(body))


async def _informer_scenario(cluster: E2ECluster, ns: str) -> None:
    client = async_client(cluster.kubeconfig)
    counts = Counts()
    informer = Informer(client, ClusterCache(), observer=counts)

    def leases() -> dict[str, Any]:
        return informer.cache.leases  # (a sync replaces the dict)

    def following() -> asyncio.Future[None]:
        return asyncio.ensure_future(informer.follow(GPULEASES))

    try:
        await apply_crds(client)
        await client.create(_lease(ns, "a"))
        await informer.sync()
        assert f"{ns}/a" in leases()
        follow = following()
        await client.create(_lease(ns, "b"))
        await wait_until_async(lambda: f"{ns}/b" in leases(), BOUND, "b from the watch")

        # The watch stops; changes land meanwhile; resumed from its last version (no list),
        # it sees each of them.
        follow.cancel()
        await asyncio.gather(follow, return_exceptions=True)
        await client.patch(
            GpuLease, "a", {"spec": {"preemptible": True}}, namespace=ns, patch_type=PatchType.MERGE
        )
        await client.delete(GpuLease, "b", namespace=ns)
        await client.create(_lease(ns, "c"))
        follow = following()
        await wait_until_async(
            lambda: (
                f"{ns}/c" in leases()
                and f"{ns}/b" not in leases()
                and leases()[f"{ns}/a"].preemptible
            ),
            BOUND,
            "the changes made while the watch was stopped",
        )
        assert counts.restarts == 0 and counts.relists == 0
        follow.cancel()
        await asyncio.gather(follow, return_exceptions=True)

        # A version the API server no longer serves: Gone, for `run` to list everything again.
        await client.delete(GpuLease, "c", namespace=ns)
        _compact(cluster)
        informer.streams[GPULEASES.kind].version = "1"
        with pytest.raises(Gone):
            await asyncio.wait_for(informer.follow(GPULEASES), BOUND)
    finally:
        await client.close()


def test_the_extender_informer_resumes_its_watch_and_hears_a_version_gone(
    dev_cluster: E2ECluster, namespace: str
) -> None:
    asyncio.run(_informer_scenario(dev_cluster, namespace))
