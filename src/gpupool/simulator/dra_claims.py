"""A simulated task as a DRA claim on gpupool's devices: what it consumes of the card it gets.

On the DRA path a card is one device (`node/dra/slices.py`) with consumable capacities `memory`
(bytes, in steps of 1 MiB, up to what the card gives slices), `compute` (percent of the SMs,
steps of 1) and `shares` (every claim consumes 1). What a claim consumes is
`domain/dra_capacity.py`'s rule, the one the controller's allocator writes live:

- a share of `gpu_milli` of a card publishing L bytes is placed as the extender path places it
  (floor(L x milli / 1000) bytes) and consumes that down to a whole MiB, and ceil(milli / 10)
  percent of compute (every share in the openb lists is a whole percent, so this rounds nothing
  there);
- a byte request consumes its bytes rounded up to a whole MiB (as the claim is read live), its
  compute percent as asked;
- a whole card consumes all of the card's memory (and all its compute, as gpupool's allocator
  writes it; kube-scheduler's own default would consume 0 compute, which on a card whose memory
  is gone changes nothing);
- every claim consumes 1 share, as every placement takes one of the card's shares on the
  extender path.

So a share never consumes more than the extender path's slice and the DRA path places the openb
lists as the extender path does; only a byte request that is not a whole MiB, or a compute share
that is not a whole percent, can be short where the planner's unrounded demand fitted, and then
`allocate_claim` closes that card and plans again.

A DRA device must publish its memory in bytes, and the openb trace's G2 and G3 cards have no
disclosed size (the simulator counts them in abstract units, on which byte figures mean
nothing), so `dra_nodes` gives them a stated stand-in size. The simulator's cards carry no
reserve on either path (on a live node the same reserve is kept back on both: the device
plugin's allocatable bytes and the slice's `memory` capacity).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpupool.domain.devices import Node
from gpupool.domain.dra_capacity import (
    MEMORY_STEP,
    asked_memory,
    consumed_memory,
    publishable_memory,
)
from gpupool.domain.errors import InvalidNode
from gpupool.domain.requests import MILLI, Request
from gpupool.placement.planner import Planner
from gpupool.placement.snapshot import ClusterSnapshot, Decision
from gpupool.placement.verdict import Unschedulable

COMPUTE_FULL_PCT = 100
PERCENT_MILLI = MILLI // COMPUTE_FULL_PCT  # one percent of a card's SMs, in milli


@dataclass(frozen=True, slots=True)
class Consumption:
    """A claim's consumedCapacity on one device."""

    memory_bytes: int
    compute_pct: int
    shares: int = 1


def consumption(req: Request, card_bytes: int) -> Consumption:
    """What `req` consumes of one card of `card_bytes` on the DRA path (module docstring)."""
    if not req.wants_gpu:
        raise InvalidNode(f"request {req.name!r} asks for no GPU; it makes no claim")
    limit = publishable_memory(card_bytes)
    if req.whole_cards:
        return Consumption(limit, COMPUTE_FULL_PCT)
    compute_pct = -(-req.compute_milli // PERCENT_MILLI)
    if req.gpu_milli is not None:  # the extender path's slice of the card, as placed
        return Consumption(consumed_memory(limit * req.gpu_milli // MILLI), compute_pct)
    return Consumption(asked_memory(req.gpu_memory_bytes or 0), compute_pct)


def dra_nodes(nodes: Sequence[Node], unknown_memory_bytes: int) -> list[Node]:
    """The nodes as the DRA path sees them: cards of undisclosed size (G2, G3) given the
    stand-in `unknown_memory_bytes`, every card's memory down to a whole step."""
    if unknown_memory_bytes < MEMORY_STEP:
        raise InvalidNode(
            f"the stand-in card size must be at least 1 MiB; got {unknown_memory_bytes} bytes"
        )
    out: list[Node] = []
    for node in nodes:
        gpus = tuple(
            replace(g, memory_bytes=publishable_memory(g.total_memory or unknown_memory_bytes))
            for g in node.gpus
        )
        out.append(replace(node, gpus=gpus))
    return out


def claim_decision(snap: ClusterSnapshot, decision: Decision) -> Decision:
    """`decision` with each card's memory and compute as the claim consumes them there."""
    i = decision.node_index
    mem: list[int] = []
    compute: list[int] = []
    for card in decision.cards:
        if not snap.mem_known[i, card]:
            raise InvalidNode(
                f"card {card} of node {decision.node} has no known memory size, so it cannot be "
                f"a DRA device; give the simulator's nodes a size for it (dra_nodes)"
            )
        used = consumption(decision.request, int(snap.gmem_total[i, card]))
        mem.append(used.memory_bytes)
        compute.append(used.compute_pct * PERCENT_MILLI)
    return replace(decision, mem_bytes=tuple(mem), compute_milli=tuple(compute))


def allocate_claim(
    planner: Planner, snap: ClusterSnapshot, req: Request
) -> Decision | Unschedulable:
    """Place `req` as a claim: the planner's choice, consumed in whole steps. Where the rounded
    slice no longer fits the card the planner chose (its floor fitted, its ceiling does not), that
    card is closed to this request and the planner chooses again, so the result is what placement
    with the rounded demand gives; the cards are reopened before returning."""
    closed: dict[str, list[int]] = {}
    try:
        while True:
            result = planner.plan(snap, req)
            if not isinstance(result, Decision):
                return result
            claim = claim_decision(snap, result)
            i = claim.node_index
            short = [
                card
                for card, mem, comp in zip(
                    claim.cards, claim.mem_bytes, claim.compute_milli, strict=True
                )
                if snap.gmem_free[i, card] < mem or snap.comp_free[i, card] < comp
            ]
            if not short:
                return claim
            slots = closed.setdefault(claim.node, [])
            slots.extend(short)
            snap.set_cards_closed(claim.node, slots, "the claim's rounded size does not fit")
    finally:
        for node in closed:
            snap.set_cards_closed(node, [], None)
