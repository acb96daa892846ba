"""Virtual devices: each card is offered to the kubelet as N `gpupool.io/vgpu` devices.

A virtual device ID names its card: `<card uuid>::<slot>` (the form NVIDIA's device plugin uses
for shared cards), so Allocate knows which card the kubelet picked without guessing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpupool.domain.devices import Gpu
from gpupool.domain.errors import InvalidRequest
from gpupool.ports import PodLease

SEPARATOR = "::"
MAX_ID_LENGTH = 63  # the kubelet's limit on a device ID


@dataclass(frozen=True, slots=True)
class VirtualDevice:
    id: str
    card_uuid: str
    slot: int
    healthy: bool
    numa_node: int


def device_id(card_uuid: str, slot: int) -> str:
    ident = f"{card_uuid}{SEPARATOR}{slot}"
    if len(ident) > MAX_ID_LENGTH:
        raise InvalidRequest(
            f"virtual device ID {ident!r} is longer than the kubelet's {MAX_ID_LENGTH} characters"
        )
    return ident


def card_of(ident: str) -> str:
    """The card uuid a virtual device ID names; InvalidRequest for anything else."""
    card, sep, slot = ident.rpartition(SEPARATOR)
    if not sep or not card or not slot.isdigit():
        raise InvalidRequest(
            f"device ID {ident!r} is not a gpupool virtual device (<card uuid>{SEPARATOR}<slot>)"
        )
    return card


def virtual_devices(gpus: Iterable[Gpu], per_card: int) -> tuple[VirtualDevice, ...]:
    """The devices to report for `gpus`: `per_card` per card, carrying the card's health."""
    if per_card < 1:
        raise InvalidRequest(f"virtual devices per card must be 1 or more; got {per_card}")
    return tuple(
        VirtualDevice(device_id(g.uuid, slot), g.uuid, slot, g.healthy, g.numa_node)
        for g in sorted(gpus, key=lambda g: g.index)
        for slot in range(per_card)
    )


def preferred_devices(
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    awaiting: Sequence[PodLease] = (),
) -> tuple[str, ...]:
    """A hint for the kubelet: `size` devices from `available`, one per card where possible.

    The kubelet does not say which pod it admits, so the hint steers toward the cards of the
    first lease (in `awaiting` order) that waits for exactly `size` cards and can be served from
    `available` together with `must_include`. Allocate still checks the real match; a wrong hint
    only costs a clear failure, never a wrong limit.
    """
    chosen: list[str] = list(dict.fromkeys(must_include))
    if size <= len(chosen):
        return tuple(chosen[:size]) if size > 0 else ()
    by_card: dict[str, list[str]] = {}
    for ident in available:
        try:
            by_card.setdefault(card_of(ident), []).append(ident)
        except InvalidRequest:
            continue
    taken_cards = {card_of(i) for i in chosen if SEPARATOR in i}

    def take_from(card: str) -> None:
        for ident in by_card.get(card, ()):
            if ident not in chosen:
                chosen.append(ident)
                taken_cards.add(card)
                return

    for lease in awaiting:
        cards = lease.card_uuids
        if len(cards) != size or not taken_cards <= set(cards):
            continue
        if all(c in taken_cards or by_card.get(c) for c in cards):
            for card in cards:
                if card not in taken_cards:
                    take_from(card)
            return tuple(chosen)
    # No lease to steer by: spread over distinct cards, then fill from any card.
    for card in by_card:
        if len(chosen) >= size:
            break
        if card not in taken_cards:
            take_from(card)
    for ident in available:
        if len(chosen) >= size:
            break
        if ident not in chosen:
            chosen.append(ident)
    return tuple(chosen)
