"""The web view's model fed by its watch cache (adapters/web/feed.py): after each watched change,
its render equals the views built afresh from one read of the same cache (`read_views`, the
path `gpupool status` takes), unreadable objects included; and a change the views do not show
renders nothing new."""

from __future__ import annotations

import asyncio
import copy
import sys
from pathlib import Path
from typing import Any, cast

from gpupool.adapters.kubernetes.lease import lease_to_json
from gpupool.adapters.kubernetes.views_read import read_views
from gpupool.adapters.kubernetes.watch_cache import WatchCache
from gpupool.adapters.web.feed import CacheFeed
from gpupool.cli.web import WEB_KINDS
from gpupool.domain.units import GiB
from gpupool.state.objects import Event
from gpupool.state.views.status import StatusView, build_status

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "views"))

from pool_fixture import NOW, lease

Json = dict[str, Any]


def node_json(name: str, ready: str = "True") -> Json:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": {}},
        "status": {"conditions": [{"type": "Ready", "status": ready, "lastHeartbeatTime": "t0"}]},
    }


def gpunode_json(name: str, cards: int = 2, health: str = "Healthy") -> Json:
    devices = [
        {"index": i, "model": "A100-80GB", "uuid": f"GPU-{name}-{i}", "memoryBytes": 80 * GiB,
         "allocatableBytes": 72 * GiB}
        for i in range(cards)
    ]  # fmt: skip
    return {
        "metadata": {"name": name, "uid": f"uid-gn-{name}"},
        "status": {"health": health, "devices": devices},
    }


def pod_json(name: str, tenant: str, *, gated: bool) -> Json:
    return {
        "metadata": {
            "name": name,
            "namespace": tenant,
            "uid": f"uid-{name}",
            "labels": {"gpupool.io/tenant": tenant},
            "annotations": {},
            "creationTimestamp": "2027-01-15T08:00:00Z",
        },
        "spec": {
            "containers": [
                {"name": "main", "resources": {"limits": {"gpupool.io/gpu-memory": "8Gi"}}}
            ],
            "schedulingGates": [{"name": "gpupool.io/quota"}] if gated else [],
        },
        "status": {"phase": "Pending"},
    }


def quota_json(name: str, nominal: str = "80Gi", queued: int = 0) -> Json:
    return {
        "metadata": {"name": name, "uid": f"uid-q-{name}"},
        "spec": {"nominal": nominal},
        "status": {"usedAmount": 8 * GiB, "queued": queued},
    }


class Cluster:
    """A watch cache fed by hand, as its reflectors feed it, and the feed that hears it."""

    def __init__(self) -> None:
        self.cache = WatchCache(cast(Any, None), WEB_KINDS)  # never lists: fed by `write`
        self.pokes = 0
        self.feed = CacheFeed(self.cache, self._poke)
        self.version = 0
        for reflector in self.cache.reflectors.values():
            reflector.store.synced = True
            reflector.synced.set()

    def _poke(self) -> None:
        self.pokes += 1

    def write(self, kind: str, obj: Json, event: Event = Event.MODIFIED) -> None:
        obj = copy.deepcopy(obj)
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        reflector = self.cache.reflectors[kind]
        change = reflector.store.apply(event, obj)
        if change is not None:
            reflector.changed(change)

    async def both(self, now: float = NOW) -> tuple[StatusView, StatusView]:
        """The feed's render, and the views built afresh from one read of the same cache."""
        fresh = build_status(await read_views(cast(Any, None), cache=self.cache), now)
        return await self.feed.render(now), fresh


def test_each_change_renders_what_a_fresh_read_builds() -> None:
    async def main() -> None:
        c = Cluster()
        for name in ("node-a", "node-b"):
            c.write("nodes", node_json(name), Event.ADDED)
            c.write("gpunodes", gpunode_json(name), Event.ADDED)
        c.write("gpuquotas", quota_json("team-a", queued=1), Event.ADDED)
        c.write("pods", pod_json("waits", "team-a", gated=True), Event.ADDED)
        one = lease("team-a", "runs", "node-a", [(0, 0, 12)])
        c.write("gpuleases", lease_to_json(one) | {"metadata": {"name": one.name,
                "namespace": one.namespace, "uid": "uid-l1"}}, Event.ADDED)  # fmt: skip
        got, fresh = await c.both()
        assert got == fresh
        assert [n.name for n in got.pool.nodes] == ["node-a", "node-b"]
        assert got.pool.totals.slices == 1 and len(got.queue) == 1
        steps = [
            ("nodes", node_json("node-b", ready="False")),  # not ready: a condition on the map
            ("gpunodes", gpunode_json("node-a", health="Lost")),
            ("gpuquotas", quota_json("team-a", nominal="160Gi")),
            ("gpunodes", {"metadata": {"name": "node-b", "uid": "x"}, "status": {"devices": 7}}),
            ("gpunodes", gpunode_json("node-b", cards=4)),
        ]
        for kind, obj in steps:
            c.write(kind, obj)
            got, fresh = await c.both()
            assert got == fresh, (kind, obj)
        bad = {"metadata": {"name": "broken", "namespace": "team-a", "uid": "b"}, "spec": {}}
        c.write("gpuleases", bad, Event.ADDED)
        got, fresh = await c.both()
        assert got == fresh and any("unreadable" in n for n in got.notes)
        c.write("gpuleases", bad, Event.DELETED)
        got, fresh = await c.both()
        assert got == fresh and not got.notes
        c.write("nodes", node_json("node-a"), Event.DELETED)
        got, fresh = await c.both()
        assert got == fresh and [u.lease for u in got.pool.unplaced] == [one.key]
        got, fresh = await c.both(NOW + 30)  # the clock's next step: held times move
        assert got == fresh

    asyncio.run(main())


def test_a_change_the_views_do_not_show_renders_the_same_view() -> None:
    async def main() -> None:
        c = Cluster()
        c.write("nodes", node_json("node-a"), Event.ADDED)
        c.write("gpunodes", gpunode_json("node-a"), Event.ADDED)
        c.write("pods", pod_json("waits", "team-a", gated=True), Event.ADDED)
        first = await c.feed.render(NOW)
        pokes = c.pokes
        beat = node_json("node-a")
        beat["status"]["conditions"][0]["lastHeartbeatTime"] = "t1"
        c.write("nodes", beat)  # a heartbeat: the cache does not even pass it on
        assert c.pokes == pokes
        noted = pod_json("waits", "team-a", gated=True)
        noted["metadata"]["annotations"]["example.com/seen"] = "yes"
        c.write("pods", noted)  # heard, decoded, equal to what is held
        assert c.pokes == pokes + 1
        assert await c.feed.render(NOW) is first

    asyncio.run(main())
