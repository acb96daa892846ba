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
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec
import numpy as np

from gpupool.adapters.extender_http.cache import ClusterCache
from gpupool.adapters.extender_http.wire import (
    MAX_EXTENDER_PRIORITY,
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    HostPriority,
)
from gpupool.adapters.kubernetes import ANN_ALLOCATION, ANN_LEASE, ANN_POLICY
from gpupool.adapters.kubernetes.lease import LeaseRecord, PodRef
from gpupool.adapters.kubernetes.pod import allocation_annotation, request_from_pod
from gpupool.adapters.wire.admitted import read_admitted
from gpupool.domain.allocations import Allocation, Slice
from gpupool.domain.devices import Node
from gpupool.domain.errors import GpupoolError, InvalidRequest
from gpupool.domain.requests import MILLI, Request
from gpupool.domain.units import GiB
from gpupool.placement import Planner, TargetWorkload
from gpupool.placement.filters import UNRESOLVABLE, Feasibility, Reason, explain, feasibility
from gpupool.placement.snapshot import ClusterSnapshot

log = logging.getLogger(__name__)

BIND_ROUNDS = 3
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

    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None: ...


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


def first_gap(taken: Sequence[tuple[int, int]], size: int, capacity: int) -> int | None:
    """Lowest logical offset where `size` bytes fit between the (offset, size) ranges taken."""
    at = 0
    for offset, length in sorted(taken):
        if offset - at >= size:
            return at
        at = max(at, offset + length)
    return at if capacity - at >= size else None


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
    ) -> None:
        self.cache = cache
        self.api = api
        self.policy = policy
        self.workload = workload or default_workload()
        self._planners: dict[str, Planner] = {}
        self._plans: dict[str, _Plan] = {}
        self._rows_memo: dict[tuple[int, tuple[str, ...]], np.ndarray] = {}
        self._rows_memo_size = rows_memo  # 0: no memo (the bench's "before")
        self._heads_memo: dict[tuple[str, ...], tuple[bytes, ...]] = {}
        self._bind_lock = asyncio.Lock()
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
        return ExtenderFilterResult(
            node_names=tuple(passing) if passing else None,
            failed_nodes=failed,
            failed_and_unresolvable=unresolvable,
        )

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
    async def bind(self, args: ExtenderBindingArgs) -> ExtenderBindingResult:
        if self.api is None:
            return ExtenderBindingResult("this extender has no API client; it cannot bind")
        async with self._bind_lock:
            return await self._bind(args, self.api)

    async def _bind(self, args: ExtenderBindingArgs, api: ExtenderApi) -> ExtenderBindingResult:
        ns, name, node = args.pod_namespace, args.pod_name, args.node
        pod = await api.get_pod(ns, name)
        meta = pod.get("metadata") or {}
        if meta.get("uid") != args.pod_uid:
            return ExtenderBindingResult(
                f"pod {ns}/{name} has uid {meta.get('uid')}, not {args.pod_uid}: it was replaced"
            )
        req = request_from_pod(pod)
        if not req.wants_gpu:
            return ExtenderBindingResult(f"pod {ns}/{name} asks for no gpupool GPU")
        bound_to = (pod.get("spec") or {}).get("nodeName")
        lease: LeaseRecord | None = None
        for _ in range(BIND_ROUNDS):
            fresh = await api.leases_on_node(node)
            self._fold(node, fresh)
            mine = [x for x in fresh if x.pod.uid == args.pod_uid and x.holds_capacity]
            if mine:
                lease = mine[0]  # a retried bind: the reservation already stands
                break
            if bound_to:
                return ExtenderBindingResult(f"pod {ns}/{name} is already bound to {bound_to}")
            planned = self._reserve_plan(req, pod, node, fresh)
            if isinstance(planned, str):
                return ExtenderBindingResult(planned)
            try:
                lease = await api.create_lease(planned)
            except LeaseExists:
                existing = await api.get_lease(ns, args.pod_uid)
                if existing is not None and existing.node != node and existing.holds_capacity:
                    if existing.phase not in (None, "Reserved"):
                        return ExtenderBindingResult(
                            f"pod {ns}/{name} already holds lease {existing.key} on {existing.node}"
                        )
                    # Reserved elsewhere for this pod, which is not bound (read above): what a bind
                    # killed between the lease and the Binding leaves. Binds are serialised here
                    # and only the leader binds, so none is in flight: free it and plan again;
                    # kept, it would hold its card and refuse the pod every other node for good.
                    log.warning(
                        "pod %s/%s: releasing the stale reservation %s on %s to bind on %s",
                        ns, name, existing.key, existing.node, node,
                    )  # fmt: skip
                    await api.delete_lease(existing.namespace, existing.name)
                    self.cache.delete_lease(existing.key)
                continue  # re-read the node and plan again
            break
        else:
            return ExtenderBindingResult(f"could not reserve a slice on {node} after retries")
        assert lease is not None
        self.cache.set_lease(lease)
        try:
            await api.annotate_pod(
                ns,
                name,
                {
                    ANN_ALLOCATION: allocation_annotation_of(lease),
                    ANN_LEASE: lease.key,
                },
            )
            if not bound_to:
                await api.bind_pod(ns, name, args.pod_uid, node)
        except Exception as err:
            log.warning("bind %s/%s to %s failed after the reservation: %s", ns, name, node, err)
            if await self._bound_anyway(api, ns, name, args.pod_uid, node):
                return ExtenderBindingResult()  # the Binding landed; only its reply was lost
            try:
                await api.delete_lease(lease.namespace, lease.name)
            finally:
                self.cache.delete_lease(lease.key)
            return ExtenderBindingResult(f"bind {ns}/{name} to {node} failed: {err}")
        return ExtenderBindingResult()

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
        slices = []
        for s in allocation.slices:
            gpu = next(g for g in domain.gpus if g.index == s.gpu_index)
            taken = [
                (x.offset_bytes, x.size_bytes)
                for lease in fresh
                if lease.holds_capacity
                for x in lease.slices
                if x.gpu_index == s.gpu_index
            ]
            offset = first_gap(taken, s.size_bytes, gpu.total_memory or 0)
            slices.append(
                Slice(
                    gpu_index=s.gpu_index,
                    uuid=s.uuid,
                    model=s.model,
                    offset_bytes=s.offset_bytes if offset is None else offset,
                    size_bytes=s.size_bytes,
                    compute_milli=s.compute_milli,
                )
            )
        problem = check_fit(domain, fresh, slices)
        if problem is not None:
            return f"node {node} changed under the plan: {problem}"
        meta = pod.get("metadata") or {}
        amount = sum(s.size_bytes for s in slices)
        # What the admission queue recorded when it ungated the pod: reclaim finds borrowed
        # (and preemptible) leases by these fields. CEL keeps borrowed within amount.
        mark = read_admitted(meta.get("annotations"))
        return LeaseRecord(
            name=str(meta["uid"]),
            namespace=str(meta["namespace"]),
            tenant=req.tenant,
            pod=PodRef(str(meta["namespace"]), str(meta["name"]), str(meta["uid"])),
            node=node,
            slices=tuple(slices),
            amount=amount,
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
