"""The extender's decisions: filter and prioritize over the cache's snapshot with the pure planner,
and bind, which reserves the slice as the pod's GpuLease before anything else is written.

Bind, in order (each bind holds one lock, so one extender never interleaves two):
1. read the pod fresh (its uid must match; a pod already bound to this node with its lease is
   answered as done: kube-scheduler may retry a bind);
2. list the leases on the node from the API server (a consistent read, not the cache) and fold them
   into the cache, so a stale cache can never hide a lease;
3. plan the pod on that node; check the chosen slices against every lease just listed; a lease
   named after the pod uid that already exists elsewhere is a conflict (the create fails, nothing
   is double-booked), one on this node is reused;
4. create the GpuLease (AlreadyExists → re-read and re-plan, at most three rounds);
5. annotate the pod (`gpupool.io/allocation`, `gpupool.io/lease`), then create the Binding;
   if either fails the lease is deleted again.
The lease carries `borrowed` and `preemptible` from the pod's `gpupool.io/admitted` annotation
(written by the admission queue with the gate's removal), so reclaim can find borrowed leases.

Room holds: a node where reclaim made room for a pod (a GpuLease's `status.reclaim` with `room`
and `holdUntil`, `room_hold`) is refused to every other pod, failed and unresolvable, until that
pod is bound or the hold ends.

Requeue: kube-scheduler parks a pod that filter refused on every node until a cluster event it
watches (a pod, a node) may change that; leases and GpuNodes are not such events. A lease the
controller releases after the pod's last attempt would leave the pod waiting for the queue's
periodic flush (5 minutes by default) while its cards stand free. So filter remembers the pods it
refused everywhere, and `requeue_refused` (run every second by the leader) annotates each one
that now fits some node in the cache (`gpupool.io/requeue`): that pod update sends it back to
kube-scheduler's queue, and its next filter reads the cache that found the room.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec
import numpy as np

from gpupool.adapters.extender_http.room_hold import held_against
from gpupool.adapters.extender_http.wire import (
    MAX_EXTENDER_PRIORITY,
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    HostPriority,
)
from gpupool.adapters.kubernetes import ANN_ALLOCATION, ANN_LEASE, ANN_POLICY
from gpupool.adapters.kubernetes.pod import allocation_annotation, request_from_pod
from gpupool.adapters.wire.admitted import read_admitted
from gpupool.adapters.wire.names import ANN_REQUEUE
from gpupool.domain.allocations import (
    MAX_EXTENTS,
    Allocation,
    Slice,
    free_ranges,
    laid_out,
    lay_out,
)
from gpupool.domain.devices import Node
from gpupool.domain.errors import GpupoolError, InvalidRequest
from gpupool.domain.requests import MILLI, Request
from gpupool.domain.units import GiB
from gpupool.placement import Planner, TargetWorkload
from gpupool.placement.filters import UNRESOLVABLE, Feasibility, Reason, explain, feasibility
from gpupool.placement.snapshot import ClusterSnapshot
from gpupool.quota.lease import LeasePhase
from gpupool.state.cluster import ClusterCache
from gpupool.state.lease import LeaseRecord, PodRef
from gpupool.state.node_ledger import NodeLedger

log = logging.getLogger(__name__)

BIND_ROUNDS = 3
MAX_BINDS = 64  # binds in flight at once (each holds API connections)
BIND_WAIT_S = 2.0  # a bind that cannot start within this is refused, well inside kube-scheduler's
# 5 s httpTimeout: refused, the pod is simply retried; timed out, the bind would run on unseen
BIND_FORWARD_TIMEOUT_S = 4.0  # a standby's /bind forwarded to the leader: room for the leader's
# BIND_WAIT_S and its writes, and 1 s of the 5 s httpTimeout left to answer kube-scheduler an Error
LEDGER_MAX_AGE_S = 10.0  # a node's ledger is re-listed from the API server at least this often
POD_MEMO = 4096  # pods kept from filter for their bind
REFUSED_MAX = 256  # pods refused everywhere kept for requeue_refused (beyond: the queue's flush)
REQUEUE_PERIOD_S = 1.0
ROWS_MEMO = 8  # node lists whose snapshot rows are kept (filter's list, prioritize's, ...)
_SCORE_TAILS = tuple(f"{s}}}".encode() for s in range(MAX_EXTENDER_PRIORITY + 1))


class LeaseExists(Exception):
    """The API server already holds a GpuLease of that name (create conflict)."""


class ExtenderApi(Protocol):
    """What bind needs from the API server (implemented with lightkube in `k8s_api.py`)."""

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any]: ...

    async def leases_on_node(self, node: str) -> list[LeaseRecord]: ...

    async def get_lease(self, namespace: str, name: str) -> LeaseRecord | None: ...

    async def create_lease(self, lease: LeaseRecord) -> LeaseRecord: ...

    async def delete_lease(self, namespace: str, name: str) -> None: ...

    async def annotate_pod(
        self, namespace: str, name: str, annotations: dict[str, str]
    ) -> None: ...

    async def bind_pod(
        self,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        annotations: dict[str, str] | None = None,
    ) -> None: ...


def default_workload() -> TargetWorkload:
    """The task shapes the `gpupool`/`fgd` policies measure fragmentation against when the
    cluster has told us nothing yet: common inference slices and whole-card training."""
    reqs = [
        Request(name=f"m{g}", gpu_count=1, gpu_memory_bytes=g * GiB) for g in (4, 8, 12, 16, 24, 40)
    ] + [Request(name=f"w{n}", gpu_count=n, gpu_milli=MILLI) for n in (1, 2, 4, 8)]
    return TargetWorkload.from_requests(reqs, cutoff=1.0)


def scale_scores(scores: Sequence[float]) -> list[int]:
    """Map planner scores (higher is better, any range) onto kube-scheduler's 0..10."""
    if not len(scores):
        return []
    lo, hi = float(min(scores)), float(max(scores))
    if hi <= lo:
        return [MAX_EXTENDER_PRIORITY] * len(scores)
    return [round(MAX_EXTENDER_PRIORITY * (float(s) - lo) / (hi - lo)) for s in scores]


def lay_out_slices(
    node: Node, leases: Sequence[LeaseRecord], planned: Sequence[Slice]
) -> tuple[Slice, ...] | str:
    """`planned` with logical layouts that share no byte with the live `leases` on `node` (nor
    with each other): per card the lowest free range long enough, else several free ranges
    (`lay_out`). Why not, when a card lacks the bytes or has them in too many pieces."""
    cards = {g.index: g for g in node.gpus}
    held = [x for lease in leases if lease.holds_capacity for x in lease.slices]
    out: list[Slice] = []
    for s in planned:
        gpu = cards.get(s.gpu_index)
        if gpu is None or gpu.total_memory is None:
            return f"GPU {s.gpu_index} is not on node {node.name}"
        taken = [r for x in (*held, *out) if x.gpu_index == s.gpu_index for r in x.ranges]
        extents = lay_out(taken, s.size_bytes, gpu.total_memory)
        if extents is None:
            free = sum(n for _, n in free_ranges(taken, gpu.total_memory))
            return f"GPU {s.gpu_index} on {node.name} has {free} bytes free"
        if len(extents) > MAX_EXTENTS:
            return (
                f"GPU {s.gpu_index} on {node.name} has {s.size_bytes} bytes free only in more "
                f"than {MAX_EXTENTS} separate ranges"
            )
        out.append(laid_out(s, extents))
    return tuple(out)


def check_fit(node: Node, leases: Sequence[LeaseRecord], slices: Sequence[Slice]) -> str | None:
    """Why `slices` cannot join the leases on `node` (a card over-committed), or None."""
    cards = {g.index: g for g in node.gpus}
    for s in slices:
        gpu = cards.get(s.gpu_index)
        if gpu is None or gpu.total_memory is None:
            return f"GPU {s.gpu_index} is not on node {node.name}"
        held = [x for lease in leases if lease.holds_capacity for x in lease.slices]
        same = [x for x in held if x.gpu_index == s.gpu_index]
        used = sum(x.size_bytes for x in same)
        compute = sum(x.compute_milli for x in same)
        if used + s.size_bytes > gpu.total_memory:
            return f"GPU {s.gpu_index} on {node.name} has {gpu.total_memory - used} bytes free"
        if compute + s.compute_milli > MILLI:
            return f"GPU {s.gpu_index} on {node.name} has {(MILLI - compute) // 10}% compute free"
    return None


class KeyedLocks:
    """One asyncio lock per key (a node, a pod uid), dropped when no one holds or awaits it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        entry = self._locks.get(key)
        if entry is None:
            entry = self._locks[key] = (asyncio.Lock(), [0])
        lock, users = entry
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if not users[0]:
                del self._locks[key]

    def __len__(self) -> int:
        return len(self._locks)


@dataclass(frozen=True, slots=True)
class _Plan:
    generation: int
    snapshot_uid: int
    request: Request
    feas: Feasibility
    rows: np.ndarray
    scores: np.ndarray


class Extender:
    def __init__(
        self,
        cache: ClusterCache,
        api: ExtenderApi | None = None,
        *,
        policy: str = "gpupool",
        workload: TargetWorkload | None = None,
        rows_memo: int = ROWS_MEMO,
        max_binds: int = MAX_BINDS,
        bind_wait_s: float = BIND_WAIT_S,
        ledger_max_age_s: float = LEDGER_MAX_AGE_S,
        serial_bind: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cache = cache
        self.clock = clock  # wall clock: room holds end at a time written on the API server
        self.api = api
        self.policy = policy
        self.workload = workload or default_workload()
        self._planners: dict[str, Planner] = {}
        self._plans: dict[str, _Plan] = {}
        self._rows_memo: dict[tuple[int, tuple[str, ...]], np.ndarray] = {}
        self._rows_memo_size = rows_memo  # 0: no memo (the bench's "before")
        self._heads_memo: dict[tuple[str, ...], tuple[bytes, ...]] = {}
        self.max_binds = max_binds
        self.bind_wait_s = bind_wait_s
        # serial_bind: one global lock, the node re-listed and the pod read at every bind, the
        # annotation and the Binding as two writes (what bind did before; the bench's "before")
        self.ledger_max_age_s = 0.0 if serial_bind else ledger_max_age_s
        self._serial = asyncio.Lock() if serial_bind else None
        self._slots = asyncio.Semaphore(max_binds)
        self._pod_locks = KeyedLocks()
        self._node_locks = KeyedLocks()
        self._ledgers: dict[str, NodeLedger] = {}
        self._pods: dict[str, Mapping[str, Any]] = {}
        # uid → the pod filter found no node for, and the nodes kube-scheduler offered it
        self._refused: dict[str, tuple[Mapping[str, Any], tuple[str, ...]]] = {}
        self._refused_seen = -1  # the cache generation requeue_refused last looked at
        self.on_step: Callable[[str, float], None] | None = None  # bind step timings (metrics)
        self.planner(policy)  # an unknown default policy fails at start, not at the first pod

    def planner(self, policy: str) -> Planner:
        if policy not in self._planners:
            self._planners[policy] = Planner(policy, self.workload)
        return self._planners[policy]

    def _policy_of(self, pod: Mapping[str, Any]) -> str:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        return str(annotations.get(ANN_POLICY) or self.policy)

    def _plan(self, pod: Mapping[str, Any]) -> _Plan:
        """Feasibility and scores of every node for this pod, memoised per cache state."""
        meta = pod.get("metadata") or {}
        key = str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
        snap = self.cache.snapshot()
        hit = self._plans.get(key)
        if hit and hit.generation == self.cache.generation and hit.snapshot_uid == snap.uid:
            return hit
        req = request_from_pod(pod)
        if not req.wants_gpu:
            raise InvalidRequest(f"pod {req.name} asks for no gpupool GPU")
        feas, rows, scores = self.planner(self._policy_of(pod)).scores(snap, req)
        plan = _Plan(self.cache.generation, snap.uid, req, feas, rows, scores)
        if len(self._plans) > 1024:
            self._plans.clear()
        self._plans[key] = plan
        return plan

    def _rows(self, snap: ClusterSnapshot, names: tuple[str, ...]) -> np.ndarray:
        """Snapshot row of every name (-1: not a node the extender knows).

        kube-scheduler sends the same node list call after call (every node that passed its own
        filters), so the rows are kept per snapshot and list: a hit costs hashing and comparing
        the names in C instead of a dictionary lookup per name in Python."""
        key = (snap.uid, names)
        rows = self._rows_memo.get(key)
        if rows is None:
            index = snap.index
            rows = np.fromiter((index.get(n, -1) for n in names), dtype=np.int64, count=len(names))
            rows.flags.writeable = False
            if self._rows_memo_size:
                if len(self._rows_memo) >= self._rows_memo_size:
                    self._rows_memo.pop(next(iter(self._rows_memo)))
                self._rows_memo[key] = rows
        return rows

    # ---- filter ------------------------------------------------------------------------------
    def filter(self, args: ExtenderArgs) -> ExtenderFilterResult:
        self.remember_pod(args.pod)
        try:
            plan = self._plan(args.pod)
        except GpupoolError as err:
            # The pod itself is wrong: no node can take it; say why on every node.
            why = str(err)
            return ExtenderFilterResult(
                node_names=None, failed_and_unresolvable={n: why for n in args.node_names}
            )
        snap = self.cache.snapshot()
        names = args.node_names
        rows = self._rows(snap, names)
        known = rows >= 0
        codes = np.where(known, plan.feas.reason[np.where(known, rows, 0)], -1)
        fits = codes == Reason.FITS
        passing = list(itertools.compress(names, fits.tolist()))
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        for k in np.flatnonzero(~fits).tolist():
            name, i, code = names[k], int(rows[k]), int(codes[k])
            if code < 0:
                unresolvable[name] = self.cache.why_unknown(name)
            elif Reason(code) in UNRESOLVABLE:
                unresolvable[name] = explain(snap, plan.request, plan.feas, i)
            else:
                failed[name] = explain(snap, plan.request, plan.feas, i)
        if passing and self.cache.room_holds:
            held = self._held_against(args.pod)
            if held:
                unresolvable.update((n, held[n]) for n in passing if n in held)
                passing = [n for n in passing if n not in held]
        self._note_refused(args.pod, names, refused=not passing)
        return ExtenderFilterResult(
            node_names=tuple(passing) if passing else None,
            failed_nodes=failed,
            failed_and_unresolvable=unresolvable,
        )

    def _held_against(self, pod: Mapping[str, Any]) -> dict[str, str]:
        """Nodes room is being made on for some other pod (`room_hold`), with the refusal."""
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        holds = self.cache.room_holds.values()
        return held_against(holds, uid, self.clock(), self.cache.placed)

    # ---- requeue -----------------------------------------------------------------------------
    def _note_refused(
        self, pod: Mapping[str, Any], names: tuple[str, ...], *, refused: bool
    ) -> None:
        uid = (pod.get("metadata") or {}).get("uid")
        if not uid:
            return
        self._refused.pop(str(uid), None)
        if refused:
            self._refused[str(uid)] = (pod, names)
            if len(self._refused) > REFUSED_MAX:
                self._refused.pop(next(iter(self._refused)))

    def refused_that_fit(self) -> list[Mapping[str, Any]]:
        """The pods filter refused on every node that one of those nodes now takes (forgotten
        here: each is nudged once; refused again, filter notes it again). Only after the cache
        changed since the last call."""
        if self.cache.generation == self._refused_seen:
            return []
        self._refused_seen = self.cache.generation
        snap = self.cache.snapshot()
        out = []
        for uid, (pod, names) in list(self._refused.items()):
            try:
                plan = self._plan(pod)
            except GpupoolError:
                del self._refused[uid]
                continue
            if self.cache.room_holds:
                held = self._held_against(pod)
                names = tuple(n for n in names if n not in held)
            rows = self._rows(snap, names)
            rows = rows[rows >= 0]
            if bool((plan.feas.reason[rows] == Reason.FITS).any()):
                del self._refused[uid]
                out.append(pod)
        return out

    async def requeue_refused(self) -> int:
        """Annotate every refused pod that now fits (see the module docstring); how many."""
        if self.api is None:
            return 0
        done = 0
        for pod in self.refused_that_fit():
            meta = pod.get("metadata") or {}
            ns, name = str(meta.get("namespace")), str(meta.get("name"))
            try:
                await self.api.annotate_pod(ns, name, {ANN_REQUEUE: str(self.cache.generation)})
            except Exception as err:  # gone since, or the API server unreachable: the queue's
                log.info("could not requeue pod %s/%s: %s", ns, name, err)  # flush remains
            else:
                done += 1
        return done

    async def requeue_loop(self, stop: asyncio.Event, leading: Callable[[], bool]) -> None:
        """`requeue_refused` every REQUEUE_PERIOD_S while `leading()`, until `stop` is set."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=REQUEUE_PERIOD_S)
            if stop.is_set() or not leading():
                continue
            try:
                await self.requeue_refused()
            except Exception:
                log.exception("requeue of refused pods failed; retrying")

    # ---- prioritize --------------------------------------------------------------------------
    def _scores(self, args: ExtenderArgs) -> list[int]:
        """kube-scheduler's 0..10 score of every name in the request, in its order."""
        names = args.node_names
        try:
            plan = self._plan(args.pod)
        except GpupoolError:
            return [0] * len(names)
        snap = self.cache.snapshot()
        by_row = np.full(len(snap) + 1, np.nan)  # the extra last slot answers unknown names
        by_row[plan.rows] = plan.scores
        values = by_row[self._rows(snap, names)]
        ok = ~np.isnan(values)
        scaled = np.zeros(len(names), dtype=np.int64)
        if ok.any():
            lo, hi = float(values[ok].min()), float(values[ok].max())
            if hi > lo:
                scaled[ok] = np.rint(MAX_EXTENDER_PRIORITY * (values[ok] - lo) / (hi - lo))
            else:
                scaled[ok] = MAX_EXTENDER_PRIORITY
        scores: list[int] = scaled.tolist()
        return scores

    def prioritize_json(self, args: ExtenderArgs) -> list[dict[str, Any]]:
        """The prioritize reply as JSON-ready dicts."""
        names = args.node_names
        return [{"Host": n, "Score": v} for n, v in zip(names, self._scores(args), strict=True)]

    def prioritize_encoded(self, args: ExtenderArgs) -> bytes:
        """The prioritize reply as JSON text (the hot path: with 5,000 hosts, building a dict per
        host and encoding it costs more than the planning). Each host's `{"Host":"…","Score":`
        is kept per node list, as the rows are; the scores are one of eleven endings."""
        names = args.node_names
        heads = self._heads_memo.get(names)
        if heads is None:
            heads = tuple(b'{"Host":' + msgspec.json.encode(n) + b',"Score":' for n in names)
            if len(self._heads_memo) >= max(self._rows_memo_size, 1):
                self._heads_memo.pop(next(iter(self._heads_memo)))
            self._heads_memo[names] = heads
        tails = map(_SCORE_TAILS.__getitem__, self._scores(args))
        return b"[" + b",".join(map(bytes.__add__, heads, tails)) + b"]"

    def prioritize(self, args: ExtenderArgs) -> list[HostPriority]:
        return [HostPriority(h["Host"], h["Score"]) for h in self.prioritize_json(args)]

    # ---- bind --------------------------------------------------------------------------------
    def remember_pod(self, pod: Mapping[str, Any]) -> None:
        """Keep the pod kube-scheduler sent with filter, by uid, for its bind (saves a GET)."""
        uid = (pod.get("metadata") or {}).get("uid")
        if uid:
            self._pods.pop(str(uid), None)
            self._pods[str(uid)] = pod
            if len(self._pods) > POD_MEMO:
                self._pods.pop(next(iter(self._pods)))

    def _timed(self, step: str, t0: float) -> float:
        now = time.perf_counter()
        if self.on_step is not None:
            self.on_step(step, now - t0)
        return now

    async def bind(self, args: ExtenderBindingArgs) -> ExtenderBindingResult:
        if self.api is None:
            return ExtenderBindingResult("this extender has no API client; it cannot bind")
        if self._serial is not None:  # one bind at a time (the bench's "before")
            async with self._serial:
                return await self._bind(args, self.api)
        t0 = time.perf_counter()
        try:
            async with asyncio.timeout(self.bind_wait_s):
                await self._slots.acquire()
        except TimeoutError:
            return ExtenderBindingResult(
                f"gpupool extender busy: {self.max_binds} binds in flight for over "
                f"{self.bind_wait_s:g} s; pod {args.pod_namespace}/{args.pod_name} not bound"
            )
        try:
            self._timed("wait", t0)
            return await self._bind(args, self.api)
        finally:
            self._slots.release()

    async def _bind(self, args: ExtenderBindingArgs, api: ExtenderApi) -> ExtenderBindingResult:
        ns, name, node, uid = args.pod_namespace, args.pod_name, args.node, args.pod_uid
        async with self._pod_locks.hold(uid):
            t = time.perf_counter()
            pod = self._pods.pop(uid, None) if self._serial is None else None
            fresh_pod = pod is None
            if pod is None:
                pod = await api.get_pod(ns, name)
                t = self._timed("get_pod", t)
            meta = pod.get("metadata") or {}
            if meta.get("uid") != uid:
                return ExtenderBindingResult(
                    f"pod {ns}/{name} has uid {meta.get('uid')}, not {uid}: it was replaced"
                )
            req = request_from_pod(pod)
            if not req.wants_gpu:
                return ExtenderBindingResult(f"pod {ns}/{name} asks for no gpupool GPU")
            # Only a pod read just now can say it is bound; the filter's copy was not (a bind that
            # landed since fails its Binding, and `_bound_anyway` reads the pod then).
            bound_to = (pod.get("spec") or {}).get("nodeName") if fresh_pod else None
            reserved = await self._reserve(args, api, pod, req, bound_to)
            if isinstance(reserved, str):
                return ExtenderBindingResult(reserved)
            lease, created = reserved
            t = time.perf_counter()
            annotations = {ANN_ALLOCATION: allocation_annotation_of(lease), ANN_LEASE: lease.key}
            try:
                if bound_to:  # a retried bind whose Binding landed: only the annotation is owed
                    await api.annotate_pod(ns, name, annotations)
                elif self._serial is not None:  # the old sequence: annotate, then bind
                    await api.annotate_pod(ns, name, annotations)
                    await api.bind_pod(ns, name, uid, node)
                else:  # the Binding's annotations land on the pod with its nodeName, atomically
                    await api.bind_pod(ns, name, uid, node, annotations)
                self._timed("binding", t)
            except Exception as err:
                log.warning(
                    "bind %s/%s to %s failed after the reservation: %s", ns, name, node, err
                )
                if await self._bound_anyway(api, ns, name, uid, node):
                    if created and not bound_to:  # our Binding lost; an earlier one won: annotate
                        with contextlib.suppress(Exception):
                            await api.annotate_pod(ns, name, annotations)
                    return ExtenderBindingResult()  # the Binding landed; only its reply was lost
                try:
                    await api.delete_lease(lease.namespace, lease.name)
                finally:
                    self.cache.delete_lease(lease.key)
                    self._ledger(node).discard(lease.key)
                return ExtenderBindingResult(f"bind {ns}/{name} to {node} failed: {err}")
            return ExtenderBindingResult()

    async def _reserve(
        self,
        args: ExtenderBindingArgs,
        api: ExtenderApi,
        pod: Mapping[str, Any],
        req: Request,
        bound_to: str | None,
    ) -> tuple[LeaseRecord, bool] | str:
        """The pod's lease on the node: one it already holds (False) or one created now (True)."""
        ns, name, node, uid = args.pod_namespace, args.pod_name, args.node, args.pod_uid
        ledger = self._ledger(node)
        for round_ in range(BIND_ROUNDS):
            async with self._node_locks.hold(node):
                t = time.perf_counter()
                listed = bool(round_) or ledger.stale(self.ledger_max_age_s, time.monotonic())
                if listed:
                    # A consistent list of the node, folded into the cache: the ledger starts
                    # again from the API server's word (plus creates still in flight).
                    inflight = ledger.listing()
                    fresh = await api.leases_on_node(node)
                    ledger.refresh(fresh, inflight, time.monotonic())
                    self._fold(node, ledger.leases())
                    t = self._timed("list_leases", t)
                known = ledger.leases()
                mine = [x for x in known if x.pod.uid == uid and x.holds_capacity]
                if mine:
                    return mine[0], False  # a retried bind: the reservation already stands
                if bound_to:
                    return f"pod {ns}/{name} is already bound to {bound_to}"
                planned = self._reserve_plan(req, pod, node, known)
                if isinstance(planned, str):
                    if not listed:
                        continue  # maybe only a release the ledger has not seen: re-list, re-plan
                    return planned
                # Reserved in memory before the create: later binds on this node plan around it
                # without waiting for the API server (the node lock is held only this long).
                ledger.begin(planned)
                self.cache.set_lease(planned)
                self._timed("plan", t)
            t = time.perf_counter()
            try:
                lease = await api.create_lease(planned)
            except LeaseExists:
                ledger.abort(planned.key, known=True)  # ours was not made; the pod's other is
                self.cache.delete_lease(planned.key)
                problem = await self._lease_exists(args, api, node)
                if problem is not None:
                    return problem
                continue  # re-read the node and plan again
            except BaseException:
                ledger.abort(planned.key, known=False)  # it may exist: re-list before trusting
                self.cache.delete_lease(planned.key)
                raise
            ledger.commit(lease)
            self.cache.set_lease(lease)
            self._timed("create_lease", t)
            return lease, True
        return f"could not reserve a slice on {node} after retries"

    async def _lease_exists(
        self, args: ExtenderBindingArgs, api: ExtenderApi, node: str
    ) -> str | None:
        """The create found the pod's lease already there: why bind stops, or None to re-plan."""
        ns, name, uid = args.pod_namespace, args.pod_name, args.pod_uid
        existing = await api.get_lease(ns, uid)
        if existing is None or existing.node == node or not existing.holds_capacity:
            return None
        if existing.phase is not LeasePhase.RESERVED:
            return f"pod {ns}/{name} already holds lease {existing.key} on {existing.node}"
        # Reserved elsewhere: a bind killed between the lease and the Binding leaves that, and so
        # does a bind that outlived kube-scheduler's timeout and landed. Only a fresh read of the
        # pod tells them apart; binds of one pod are serialised here and only the leader binds,
        # so an unbound pod has no bind in flight: free it and plan again; kept, it would hold its
        # card and refuse the pod every other node for good.
        pod = await api.get_pod(ns, name)
        bound_to = (pod.get("spec") or {}).get("nodeName")
        if (pod.get("metadata") or {}).get("uid") != uid:
            return f"pod {ns}/{name} was replaced"
        if bound_to:
            return f"pod {ns}/{name} is already bound to {bound_to}"
        log.warning(
            "pod %s/%s: releasing the stale reservation %s on %s to bind on %s",
            ns, name, existing.key, existing.node, node,
        )  # fmt: skip
        await api.delete_lease(existing.namespace, existing.name)
        self.cache.delete_lease(existing.key)
        self._ledger(existing.node).discard(existing.key)
        return None

    def _ledger(self, node: str) -> NodeLedger:
        ledger = self._ledgers.get(node)
        if ledger is None:
            ledger = self._ledgers[node] = NodeLedger()
        return ledger

    def forget_ledgers(self) -> None:
        """Trust nothing known about leases: each node's next bind re-lists it (a new leader)."""
        for ledger in self._ledgers.values():
            ledger.expire()

    @staticmethod
    async def _bound_anyway(api: ExtenderApi, ns: str, name: str, uid: str, node: str) -> bool:
        """After an error: is the pod bound to `node` all the same? Then the lease must stay."""
        try:
            pod = await api.get_pod(ns, name)
        except Exception:
            return False  # unknown: the caller undoes the reservation; the controller's GC and
            # the agent's re-check cover a pod that did land (no pod runs on GPU without a lease)
        meta = pod.get("metadata") or {}
        return meta.get("uid") == uid and (pod.get("spec") or {}).get("nodeName") == node

    def _fold(self, node: str, fresh: Sequence[LeaseRecord]) -> None:
        """Make the cache agree with a consistent list of the node's leases."""
        keys = {x.key for x in fresh}
        for stale in [x.key for x in self.cache.leases.values() if x.node == node]:
            if stale not in keys:
                self.cache.delete_lease(stale)
        for lease in fresh:
            self.cache.set_lease(lease)

    def _reserve_plan(
        self, req: Request, pod: Mapping[str, Any], node: str, fresh: Sequence[LeaseRecord]
    ) -> LeaseRecord | str:
        snap: ClusterSnapshot = self.cache.snapshot()
        i = snap.index.get(node)
        if i is None:
            return f"node {node}: {self.cache.why_unknown(node)}"
        planner = self.planner(self._policy_of(pod))
        feas = feasibility(snap, req)
        if int(feas.reason[i]) != Reason.FITS:
            return f"node {node} can no longer take the pod: {explain(snap, req, feas, i)}"
        decision = planner.decide(snap, req, feas, i, 0.0)
        allocation = decision.allocation(snap)
        domain = snap.nodes[i]
        problem = check_fit(domain, fresh, allocation.slices)
        laid = lay_out_slices(domain, fresh, allocation.slices) if problem is None else problem
        if isinstance(laid, str):
            return f"node {node} changed under the plan: {laid}"
        slices = laid
        meta = pod.get("metadata") or {}
        # What the admission queue recorded when it ungated the pod: reclaim finds borrowed
        # (and preemptible) leases by these fields. The lease's amount and borrowed share the
        # tenant quota's unit (milli-GPU for a `gpu` quota); without a record, bytes. CEL keeps
        # borrowed within amount.
        mark = read_admitted(meta.get("annotations"))
        resource, amount = "gpu-memory", sum(s.size_bytes for s in slices)
        if mark.resource is not None and mark.amount is not None:
            resource, amount = mark.resource, mark.amount
        return LeaseRecord(
            name=str(meta["uid"]),
            namespace=str(meta["namespace"]),
            tenant=req.tenant,
            pod=PodRef(str(meta["namespace"]), str(meta["name"]), str(meta["uid"])),
            node=node,
            slices=tuple(slices),
            amount=amount,
            resource=resource,
            priority=req.priority,
            exclusive=req.exclusive,
            borrowed=min(mark.borrowed, amount),
            preemptible=mark.preemptible,
        )


def allocation_annotation_of(lease: LeaseRecord) -> str:
    return allocation_annotation(
        Allocation(
            request=lease.pod.name, node=lease.node, cpu_milli=0, memory_mib=0, slices=lease.slices
        )
    )
