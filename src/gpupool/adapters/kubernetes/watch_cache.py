"""One process's copy of the objects it reads, fed by list+watch as client-go's reflectors do:
list once, then watch from the list's resourceVersion with bookmarks; a watch that ends is
resumed from the last version it saw; only when the API server says that version is gone (410)
is the kind listed again, and what changed in between is handed on like any watched change.

Each kind lives in a `state.objects.ObjectStore`; readers take its values (the API server's JSON,
never to be modified). Subscribers hear each change that is more than a heartbeat
(`noise.only_heartbeat`), by kind. A relist is also done every `relist_s` as a safety net
(minutes, not seconds). What the caches hold, their restarts and relists are reported to a
`CacheObserver` (the controller's and the web view's /metrics).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec
from lightkube import AsyncClient, operators
from lightkube.core.exceptions import ApiError
from lightkube.core.selector import build_selector
from lightkube.resources.apps_v1 import Deployment, StatefulSet
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.policy_v1 import PodDisruptionBudget

from gpupool.adapters.kubernetes.node_lease import NODE_LEASE_NAMESPACE
from gpupool.adapters.kubernetes.noise import only_heartbeat
from gpupool.adapters.kubernetes.resources import GpuLease, GpuNode, GpuPool, GpuQuota
from gpupool.adapters.wire import names
from gpupool.state.objects import Change, Event, Obj, ObjectStore

log = logging.getLogger("gpupool.watch")

RETRY_S = (1.0, 2.0, 5.0, 10.0, 30.0)  # before resuming a broken watch, by failures in a row
# The safety net: every kind listed again about this often, each time somewhere between 0.8 and
# 1.2 times it (jittered, so the kinds and the processes started together do not list at once).
# Half an hour: at 5,000 nodes a list of the Nodes costs a process a second or two of CPU.
RELIST_S = 1800.0
RELIST_JITTER = 0.2
LIST_PAGE = 500  # objects one list request asks for (client-go's reflector pages by 500 too)
Objects = list[Obj]  # (a Reflector's `list` method hides the builtin in its class)
LIVE_WAIT_S = 0.002  # a read that waited this long waited on the network, not on a backlog


class WatchObserver(Protocol):
    """Hears a watch resumed after it broke and a kind listed again after its first list."""

    def watch_restarted(self, kind: str) -> None: ...

    def relisted(self, kind: str) -> None: ...


class CacheObserver(WatchObserver, Protocol):
    def cache_size(self, kind: str, objects: int) -> None: ...


@dataclass(frozen=True, slots=True)
class Watched:
    """One kind a process keeps: its name in the cache, its lightkube resource, its selectors."""

    kind: str
    resource: Any
    namespaced: bool
    labels: dict[str, Any] = field(default_factory=dict)
    namespace: str = "*"  # a namespaced kind: every namespace, or this one
    # a field selector (lightkube's `fields=`), e.g. {"spec.nodeName": node}: a node agent keeps
    # only what is on its node, so its cost does not grow with the cluster
    fields: dict[str, Any] = field(default_factory=dict)
    # Seconds its readers can wait for a change (0: none). Such a watch reads its stream in
    # batches: after an event that arrived alone it waits this long, so the events that come
    # meanwhile are read together and one wake-up serves hundreds of them. For node heartbeats
    # (one event per node every 10 s), whose reader looks only at deadlines a minute apart.
    batch_s: float = 0.0

    def scope(self) -> dict[str, Any]:
        """lightkube's list/watch arguments for these objects."""
        kw: dict[str, Any] = {"namespace": self.namespace} if self.namespaced else {}
        if self.labels:
            kw["labels"] = self.labels
        if self.fields:
            kw["fields"] = self.fields
        return kw


TENANT_PODS = Watched("pods", Pod, True, {names.LABEL_TENANT: operators.exists()})
NODES = Watched("nodes", Node, False)
GPUNODES = Watched("gpunodes", GpuNode, False)
GPULEASES = Watched("gpuleases", GpuLease, True)
GPUQUOTAS = Watched("gpuquotas", GpuQuota, False)
GPUPOOLS = Watched("gpupools", GpuPool, False)
PDBS = Watched("pdbs", PodDisruptionBudget, True)
DEPLOYMENTS = Watched("deployments", Deployment, True)
STATEFULSETS = Watched("statefulsets", StatefulSet, True)
# The nodes' heartbeats: node health reads them each round; no loop wakes on a renewal.
NODE_LEASES = Watched("node-leases", Lease, True, namespace=NODE_LEASE_NAMESPACE, batch_s=1.0)
# What the controller's loops read (its ServiceAccount may list and watch each).
CONTROLLER_KINDS = (
    TENANT_PODS, NODES, GPUNODES, GPULEASES, GPUQUOTAS, GPUPOOLS, PDBS, DEPLOYMENTS, STATEFULSETS,
    NODE_LEASES,
)  # fmt: skip


class Gone(Exception):
    """The watch's resourceVersion is too old (410): the kind must be listed again."""


class WatchEnded(Exception):
    """The API server ended a watch with an error event other than 410; it is resumed."""


def request_for(
    client: AsyncClient, watched: Watched, params: dict[str, Any], *, watch: bool
) -> Any:
    """The list (or watch) request for `watched`'s objects, as lightkube builds it."""
    scope = watched.scope()
    labels, fields = scope.get("labels"), scope.get("fields")
    params = {
        **params,
        "labelSelector": build_selector(labels) if labels else None,
        "fieldSelector": build_selector(fields, for_fields=True) if fields else None,
    }
    generic: Any = client._client  # lightkube's request builder, as its watch uses it
    basic = generic.prepare_request(
        "list",
        res=watched.resource,
        namespace=scope.get("namespace"),
        watch=watch,
        params={k: v for k, v in params.items() if v is not None},
    )
    timeout = generic._watch_timeout if watch else generic._client.timeout
    return generic._client.build_request(
        basic.method, basic.url, params=basic.params, timeout=timeout
    )


async def list_objects(client: AsyncClient, watched: Watched) -> tuple[Objects, str]:
    """Every object of `watched`, in pages of LIST_PAGE, each decoded straight to a dict
    (through lightkube's models a Node costs about a millisecond, a Pod more: seconds at
    thousands of them), and the list's resourceVersion. An error status raises lightkube's
    ApiError."""
    generic: Any = client._client
    objects: Objects = []
    token: str | None = None
    while True:
        request = request_for(client, watched, {"limit": LIST_PAGE, "continue": token}, watch=False)
        response = await generic.send(request)
        if response.status_code >= 400:
            generic.raise_for_status(response)
        page = msgspec.json.decode(response.content)
        if not isinstance(page, dict):
            raise WatchEnded(f"a list of {watched.kind} was not an object")
        # a list's items carry no kind and apiVersion; the watch's objects do
        kind = str(page.get("kind") or "").removesuffix("List")
        api_version = page.get("apiVersion")
        for item in page.get("items") or ():
            if isinstance(item, dict):
                objects.append({"apiVersion": api_version, "kind": kind, **item})
        meta = page.get("metadata") or {}
        token = meta.get("continue") or None
        if token is None:
            return objects, str(meta.get("resourceVersion") or "")


async def watch_events(
    client: AsyncClient, watched: Watched, version: str
) -> AsyncIterator[tuple[str, Obj]]:
    """One watch request of `watched`'s objects from `version` (with bookmarks; lightkube's
    `watch` has no parameter for them), its events as (type, object) with each object decoded
    straight to a dict: lightkube's own watch builds its model of every object first and fails
    on a Pod BOOKMARK (whose `spec.containers` is null), ending the watch. Ends when the API
    server ends the stream; raises Gone when it says `version` is too old (410, as the watch's
    answer or as an event in it), WatchEnded on any other error event."""
    generic: Any = client._client
    request = request_for(
        client,
        watched,
        {"resourceVersion": version or None, "allowWatchBookmarks": "true"},
        watch=True,
    )
    response = await generic.send(request, stream=True)
    try:
        if response.status_code >= 400:
            await response.aread()  # ApiError reads the Status from the body
            try:
                generic.raise_for_status(response)
            except ApiError as err:
                if err.status.code == 410:
                    raise Gone(str(err.status.message)) from None
                raise
        lines = response.aiter_lines()
        clock = asyncio.get_running_loop().time
        while True:
            asked = clock()
            try:
                line = await anext(lines)
            except StopAsyncIteration:
                break
            if watched.batch_s and clock() - asked > LIVE_WAIT_S:
                # it arrived alone: let the next ones gather (see Watched.batch_s)
                await asyncio.sleep(watched.batch_s)
            if not line.strip():
                continue
            event = msgspec.json.decode(line)
            kind, obj = str(event.get("type") or ""), event.get("object") or {}
            if kind == "ERROR":  # a Status: 410 when the version is too old
                if obj.get("code") == 410:
                    raise Gone(str(obj.get("message") or "resourceVersion too old"))
                raise WatchEnded(f"the API server ended the watch: {obj.get('message')}")
            yield kind, obj
    finally:
        await response.aclose()


def event_version(obj: Obj) -> str:
    """The resourceVersion an event's object carries ("" when none)."""
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def retry_pause(failures: int) -> float:
    """Seconds to wait before trying again after `failures` failures in a row (RETRY_S)."""
    return RETRY_S[min(failures, len(RETRY_S)) - 1]


class WatchStream:
    """One kind's watch from the last version it saw (a list's, then each event's, a bookmark's
    too): what the watch caches' reflectors and the extender's informer follow alike."""

    def __init__(self, client: AsyncClient, watched: Watched, version: str = "") -> None:
        self.client = client
        self.watched = watched
        self.version = version

    async def once(self, fold: Callable[[str, Obj], None]) -> None:
        """One watch request's events (bookmarks aside) folded in, `version` moving past each;
        an event `fold` cannot take is logged and left out alone (resuming from before it would
        only read it again). Returns when the API server ends the stream; raises Gone on 410."""
        async for kind, obj in watch_events(self.client, self.watched, self.version):
            if kind != "BOOKMARK":
                try:
                    fold(kind, obj)
                except Exception as err:
                    name = (obj.get("metadata") or {}).get("name")
                    log.error(
                        "ignoring a %s event of %s %r: %s", kind, self.watched.kind, name, err
                    )
            self.version = event_version(obj) or self.version

    async def follow(
        self,
        fold: Callable[[str, Obj], None],
        observer: WatchObserver | None = None,
        stop: asyncio.Event | None = None,
    ) -> None:
        """`once` again and again until `stop` is set (or the task is cancelled): a stream the
        API server ends is resumed at once from `version`, one that breaks after a pause
        (`retry_pause`), counted as a watch restart; raises Gone for the caller to list again."""
        failures = 0
        while stop is None or not stop.is_set():
            try:
                await self.once(fold)
                failures = 0  # ended by the API server (its timeout): resume from the version
            except (Gone, asyncio.CancelledError):
                raise
            except Exception as err:
                failures += 1
                if observer is not None:
                    observer.watch_restarted(self.watched.kind)
                log.warning("watch of %s failed (%s); resuming", self.watched.kind, err)
                await _sleep_or_stop(stop, retry_pause(failures))


class Reflector:
    """Keeps one kind's store in step with the API server."""

    def __init__(
        self,
        client: AsyncClient,
        watched: Watched,
        store: ObjectStore,
        changed: Callable[[Change], None],
        observer: CacheObserver | None = None,
        relist_s: float = RELIST_S,
    ) -> None:
        self.client = client
        self.watched = watched
        self.store = store
        self.changed = changed
        self.observer = observer
        self.relist_s = relist_s
        self.stream = WatchStream(client, watched)
        self.synced = asyncio.Event()

    @property
    def version(self) -> str:
        """The version the watch goes on from ("": list first)."""
        return self.stream.version

    @version.setter
    def version(self, version: str) -> None:
        self.stream.version = version

    async def list(self) -> None:
        objects, version = await self._listed()
        for change in self.store.replace(objects):
            self.changed(change)
        self.version = version
        self.synced.set()
        self._report_size()

    async def _listed(self) -> tuple[Objects, str]:
        return await list_objects(self.client, self.watched)

    def _report_size(self) -> None:
        if self.observer is not None:
            self.observer.cache_size(self.watched.kind, len(self.store))

    def _fold(self, kind: str, data: Obj) -> None:
        change = self.store.apply(Event(kind), data)
        if change is not None:
            self.changed(change)
            self._report_size()

    async def watch(self) -> None:
        """Fold one watch request's events in until the stream ends; raises Gone on 410."""
        await self.stream.once(self._fold)

    async def run(self, stop: asyncio.Event) -> None:
        """List, watch, resume; relist on Gone and every `relist_s`; until `stop` is set."""
        failures = 0
        while not stop.is_set():
            try:
                if not self.version or not self.store.synced:
                    await self.list()
                async with asyncio.timeout(
                    self.relist_s * random.uniform(1 - RELIST_JITTER, 1 + RELIST_JITTER)
                ):
                    await self.stream.follow(self._fold, self.observer, stop)
            except asyncio.CancelledError:
                raise
            except (Gone, TimeoutError) as why:
                self.version = ""  # list again
                if self.observer is not None:
                    self.observer.relisted(self.watched.kind)
                if isinstance(why, Gone):
                    log.info("watch of %s: version gone; listing again", self.watched.kind)
            except Exception as err:  # the list failed (`follow` resumes a broken watch itself)
                failures += 1
                if self.observer is not None:
                    self.observer.watch_restarted(self.watched.kind)
                log.warning("list of %s failed (%s); trying again", self.watched.kind, err)
                await _sleep_or_stop(stop, retry_pause(failures))


class WatchCache:
    """The stores of one process, the reflectors that feed them, and who hears their changes."""

    def __init__(
        self,
        client: AsyncClient,
        kinds: Sequence[Watched],
        *,
        observer: CacheObserver | None = None,
        relist_s: float = RELIST_S,
    ) -> None:
        self._subscribers: list[tuple[frozenset[str] | None, Callable[[Change], None]]] = []
        self.stores = {w.kind: ObjectStore(w.kind) for w in kinds}
        self.reflectors = {
            w.kind: Reflector(client, w, self.stores[w.kind], self._heard, observer, relist_s)
            for w in kinds
        }

    def subscribe(
        self, call: Callable[[Change], None], kinds: frozenset[str] | None = None
    ) -> None:
        """`call` hears every change to `kinds` (None: all) that is more than a heartbeat."""
        self._subscribers.append((kinds, call))

    def _heard(self, change: Change) -> None:
        if only_heartbeat(change):
            return
        for kinds, call in self._subscribers:
            if kinds is None or change.kind in kinds:
                call(change)

    async def synced_store(self, kind: str) -> ObjectStore:
        """The store of `kind`, once its first list is in."""
        await self.reflectors[kind].synced.wait()
        return self.stores[kind]

    async def values(self, kind: str) -> list[Obj]:
        """Every object of `kind`, once its first list is in."""
        await self.reflectors[kind].synced.wait()
        return self.stores[kind].values()

    async def get(self, kind: str, key: str) -> Obj | None:
        """One object of `kind` by key (namespace/name, or name), once its first list is in."""
        await self.reflectors[kind].synced.wait()
        return self.stores[kind].get(key)

    async def run(self, stop: asyncio.Event) -> None:
        async with asyncio.TaskGroup() as group:
            for reflector in self.reflectors.values():
                group.create_task(reflector.run(stop))


async def _sleep_or_stop(stop: asyncio.Event | None, seconds: float) -> None:
    """`seconds`, or less when `stop` is set meanwhile."""
    if stop is None:
        await asyncio.sleep(seconds)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
