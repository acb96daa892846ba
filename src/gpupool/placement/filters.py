"""Filters: which nodes and cards can hold a request, and a specific reason for every rejection.

Feasibility is computed for the whole cluster at once as arrays; the text of a reason is built
only for the nodes someone asks about (the extender's failed-node map, a CLI error).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from gpupool.domain.requests import MILLI, Request
from gpupool.domain.units import format_bytes
from gpupool.placement.rows import row_any, row_count
from gpupool.placement.snapshot import BoolArray, ClusterSnapshot, IntArray


class Reason(IntEnum):
    FITS = 0
    CONDITION = 1  # cordoned / suspect / lost: the text lives on the snapshot
    NO_GPUS = 2
    MODEL = 3
    TOO_FEW_GPUS = 4
    CARD_TOO_SMALL = 5
    MEMORY_UNKNOWN = 6
    UNHEALTHY = 7
    CPU = 8
    MEMORY = 9
    GPU_MEMORY = 10
    GPU_COMPUTE = 11
    WHOLE_CARDS = 12
    SHARES = 13  # every card with room already holds as many pods as its share count
    DEFRAG = 14  # the cards with room are being cleared by defragmentation: no new slices
    OTHER_PATH = 15  # another device plugin or DRA driver hands out the node's cards too


# Rejections that no amount of preemption on the node can cure.
UNRESOLVABLE = frozenset(
    {
        Reason.NO_GPUS,
        Reason.MODEL,
        Reason.TOO_FEW_GPUS,
        Reason.CARD_TOO_SMALL,
        Reason.MEMORY_UNKNOWN,
        Reason.OTHER_PATH,  # preempting gpupool's pods there would not make the node gpupool's
    }
)


@dataclass(frozen=True, slots=True)
class Demand:
    """Per-card demand of a request on every card of the cluster."""

    mem: IntArray  # (N, G) bytes (or abstract units on unknown-memory cards)
    compute: int  # milli of the card's SMs


def card_demand(snap: ClusterSnapshot, req: Request) -> Demand:
    if req.whole_cards:
        return Demand(mem=snap.gmem_total, compute=MILLI)
    if req.gpu_milli is not None:
        key: tuple[object, ...] = ("demand-share", req.gpu_milli)
        mem = snap.static_memo.get(key)
        if mem is None:
            mem = _frozen(snap.gmem_total * req.gpu_milli // MILLI)
            snap.static_memo[key] = mem
        return Demand(mem=mem, compute=req.gpu_milli)  # type: ignore[arg-type]
    key = ("demand-bytes", req.gpu_memory_bytes or 0)
    mem = snap.static_memo.get(key)
    if mem is None:
        mem = _frozen(np.full_like(snap.gmem_total, req.gpu_memory_bytes or 0))
        snap.static_memo[key] = mem
    return Demand(mem=mem, compute=req.compute_milli)  # type: ignore[arg-type]


def _frozen(array: IntArray) -> IntArray:
    array.flags.writeable = False
    return array


def model_mask(snap: ClusterSnapshot, req: Request) -> BoolArray:
    """Cards whose model the request accepts (all present cards when it names none)."""
    if not req.models:
        return snap.present
    ids = [snap.model_ids[m] for m in req.models if m in snap.model_ids]
    if not ids:
        return np.zeros_like(snap.present)
    return snap.present & np.isin(snap.model_id, ids)


def _models_ok_row(snap: ClusterSnapshot, req: Request, i: int) -> BoolArray:
    """`model_mask(snap, req)[i]`, for one node (explain runs per failed node)."""
    if not req.models:
        return np.asarray(snap.present[i], dtype=bool)
    ids = [snap.model_ids[m] for m in req.models if m in snap.model_ids]
    return np.asarray(snap.present[i] & np.isin(snap.model_id[i], ids), dtype=bool)


@dataclass(frozen=True, slots=True)
class Feasibility:
    reason: IntArray  # (N,) Reason per node; 0 where it fits
    card_fit: BoolArray  # (N, G) cards that can take the request's per-card demand now
    demand: Demand

    @property
    def nodes(self) -> IntArray:
        return np.flatnonzero(self.reason == Reason.FITS)


def first_reason(checks: list[tuple[BoolArray, Reason]], n: int) -> IntArray:
    """Per node, the first check in `checks` that it fails (0 where it passes them all)."""
    reason = np.zeros(n, dtype=np.int64)
    for failed, why in reversed(checks):
        reason = np.where(failed, int(why), reason)
    return reason


@dataclass(frozen=True, slots=True)
class _Static:
    """The checks that depend only on the nodes' cards, health and cordons, not on what is free."""

    reason: IntArray  # (N,) first failed static check; 0 where none failed
    usable: BoolArray  # (N, G) healthy cards of an accepted model (and big enough, for bytes)


def _static(snap: ClusterSnapshot, req: Request) -> _Static:
    byte_request = req.gpu_milli is None
    key = ("static", req.wants_gpu, req.models, req.gpu_count, byte_request,
           req.gpu_memory_bytes if byte_request else None)  # fmt: skip
    hit = snap.static_memo.get(key)
    if isinstance(hit, _Static):
        return hit
    checks: list[tuple[BoolArray, Reason]] = [
        (snap.other_path, Reason.OTHER_PATH),
        (~snap.schedulable, Reason.CONDITION),
    ]
    usable = np.zeros_like(snap.present)
    if req.wants_gpu:
        models_ok = model_mask(snap, req)
        usable = models_ok & snap.healthy
        checks += [
            (snap.gpu_count == 0, Reason.NO_GPUS),
            (models_ok.sum(axis=1) == 0, Reason.MODEL),
            (models_ok.sum(axis=1) < req.gpu_count, Reason.TOO_FEW_GPUS),
        ]
        if byte_request:
            known = models_ok & snap.mem_known
            big_enough = known & (snap.gmem_total >= (req.gpu_memory_bytes or 0))
            checks += [
                (known.sum(axis=1) == 0, Reason.MEMORY_UNKNOWN),
                (big_enough.sum(axis=1) < req.gpu_count, Reason.CARD_TOO_SMALL),
            ]
            usable = usable & big_enough
        checks.append((usable.sum(axis=1) < req.gpu_count, Reason.UNHEALTHY))
    static = _Static(first_reason(checks, len(snap)), usable)
    snap.static_memo[key] = static
    return static


def feasibility(snap: ClusterSnapshot, req: Request) -> Feasibility:
    """Evaluate every node; the first failing check in a fixed order names the reason: the
    node's condition, its cards (model, count, size, health), CPU, memory, then what is free on
    its cards. The checks on the cards alone are memoised on the snapshot per kind of request."""
    static = _static(snap, req)
    demand = card_demand(snap, req)
    checks: list[tuple[BoolArray, Reason]] = [
        (snap.cpu_free < req.cpu_milli, Reason.CPU),
        (snap.mem_free < req.memory_mib, Reason.MEMORY),
    ]
    if not req.wants_gpu:
        card_fit = np.zeros_like(snap.present)
    elif req.whole_cards:
        card_fit = static.usable & (snap.share_free == MILLI)  # the card is wholly free
        checks.append((row_count(card_fit) < req.gpu_count, Reason.WHOLE_CARDS))
    else:  # a slice on each of gpu_count distinct cards
        mem_ok = static.usable & (snap.gmem_free >= demand.mem)
        room = mem_ok & (snap.comp_free >= demand.compute)
        card_fit = room & (snap.shares_free > 0)
        checks += [
            (_too_few(mem_ok, req.gpu_count), Reason.GPU_MEMORY),
            (_too_few(room, req.gpu_count), Reason.GPU_COMPUTE),
            (_too_few(card_fit, req.gpu_count), Reason.SHARES),
        ]
    if req.wants_gpu and snap.any_closed:  # with no card closed, the checks above decided it
        card_fit = card_fit & ~snap.closed
        checks.append((row_count(card_fit) < req.gpu_count, Reason.DEFRAG))
    dynamic = first_reason(checks, len(snap))
    reason = np.where(static.reason != 0, static.reason, dynamic)
    return Feasibility(reason, card_fit, demand)


def _too_few(cards: BoolArray, needed: int) -> BoolArray:
    """Per node, whether fewer than `needed` of its cards pass (one: none does, the faster test)."""
    return ~row_any(cards) if needed == 1 else row_count(cards) < needed


EXPLAIN_MEMO = 50_000  # explanations kept per snapshot before the memo starts over


def explain(snap: ClusterSnapshot, req: Request, feas: Feasibility, i: int) -> str:
    """The specific reason node `i` cannot take `req`, in words a user can act on.

    Memoised on the snapshot per node state (its version) and the request's resources: the
    extender explains every failed node of every filter call, and kube-scheduler asks about
    pods of the same size over nodes that have not changed, call after call."""
    key = ("explain", i, int(snap.version[i]), req.models, req.gpu_count, req.gpu_milli,
           req.gpu_memory_bytes, req.compute_milli, req.cpu_milli, req.memory_mib)  # fmt: skip
    text = snap.explain_memo.get(key)
    if text is None:
        if len(snap.explain_memo) >= EXPLAIN_MEMO:
            snap.explain_memo.clear()
        text = _explain(snap, req, feas, i)
        snap.explain_memo[key] = text
    return text


def _explain(snap: ClusterSnapshot, req: Request, feas: Feasibility, i: int) -> str:
    why = Reason(int(feas.reason[i]))
    node = snap.nodes[i]
    models_ok = _models_ok_row(snap, req, i)
    if why is Reason.FITS:
        return ""
    if why is Reason.OTHER_PATH:
        return snap.other_path_note[i] or "another path hands out this node's GPUs"
    if why is Reason.CONDITION:
        return snap.condition[i] or "node is not schedulable"
    if why is Reason.NO_GPUS:
        return "node has no GPUs"
    if why is Reason.MODEL:
        have = "|".join(sorted({g.model for g in node.gpus}))
        return f"gpu model {have} not in {'|'.join(req.models)}"
    if why is Reason.TOO_FEW_GPUS:
        return f"node has {int(models_ok.sum())} matching GPUs; the request needs {req.gpu_count}"
    if why is Reason.MEMORY_UNKNOWN:
        have = "|".join(sorted({g.model for g in node.gpus}))
        return f"memory size of {have} cards is unknown; ask for a GPU share instead of bytes"
    if why is Reason.CARD_TOO_SMALL:
        largest = int(snap.gmem_total[i][models_ok & snap.mem_known[i]].max(initial=0))
        return (
            f"every card is smaller than the request "
            f"({format_bytes(largest)} < {format_bytes(req.gpu_memory_bytes or 0)})"
        )
    if why is Reason.UNHEALTHY:
        return f"too few healthy GPUs (need {req.gpu_count})"
    if why is Reason.CPU:
        return f"insufficient cpu (free {int(snap.cpu_free[i])}m < {req.cpu_milli}m)"
    if why is Reason.MEMORY:
        return f"insufficient memory (free {int(snap.mem_free[i])}Mi < {req.memory_mib}Mi)"
    if why is Reason.WHOLE_CARDS:
        free = int((snap.fully_free()[i] & models_ok).sum())
        return f"needs {req.gpu_count} whole free GPUs; {free} free"
    if why is Reason.DEFRAG:
        return snap.closed_note[i] or "the cards with room are being cleared by defragmentation"
    usable = models_ok & snap.healthy[i]
    if req.gpu_count > 1:
        return _explain_cards(snap, req, feas, i, why, usable)
    if why is Reason.SHARES:
        full = usable & (snap.shares_free[i] <= 0)
        counts = sorted({int(c) for c in snap.shares_total[i][full]})
        held = "/".join(str(c) for c in counts) or "0"
        return (
            f"every card with room already holds its share count of pods ({held} per card, "
            f"the gpupool.io/vgpu devices the node offers)"
        )
    if why is Reason.GPU_MEMORY:
        free = snap.gmem_free[i][usable]
        need = feas.demand.mem[i][usable]
        if req.gpu_milli is not None:
            share = (snap.share_free[i][usable]).max(initial=0)
            return (
                f"insufficient GPU share on every card (largest free {share}m < {req.gpu_milli}m)"
            )
        return (
            f"insufficient memory on every card (largest free {format_bytes(int(free.max()))} "
            f"< {format_bytes(int(need.max()))})"
        )
    compute = snap.comp_free[i][usable & (snap.gmem_free[i] >= feas.demand.mem[i])]
    return (
        f"insufficient compute on every card with enough memory "
        f"(largest free {int(compute.max(initial=0)) // 10}% < {req.compute_milli // 10}%)"
    )


def _explain_cards(
    snap: ClusterSnapshot, req: Request, feas: Feasibility, i: int, why: Reason, usable: BoolArray
) -> str:
    """Why node i has too few cards for a slice on each of `req.gpu_count` cards."""
    mem_ok = usable & (snap.gmem_free[i] >= feas.demand.mem[i])
    room = mem_ok & (snap.comp_free[i] >= feas.demand.compute)
    k = req.gpu_count
    if req.gpu_milli is not None:
        size = f"a {req.gpu_milli}m share"
    else:
        size = format_bytes(req.gpu_memory_bytes or 0)
    if why is Reason.GPU_MEMORY:
        return f"needs {size} free on each of {k} cards; {int(mem_ok.sum())} have it"
    if why is Reason.GPU_COMPUTE:
        return (
            f"needs {size} and {req.compute_milli // 10}% compute free on each of {k} cards; "
            f"{int(room.sum())} have both"
        )
    fit = int((room & (snap.shares_free[i] > 0)).sum())
    return (
        f"needs {k} cards with room and a free share (gpupool.io/vgpu device); {fit} have both, "
        f"the others already hold their share count of pods"
    )


def is_unresolvable(feas: Feasibility, i: int) -> bool:
    return Reason(int(feas.reason[i])) in UNRESOLVABLE
