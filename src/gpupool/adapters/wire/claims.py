"""What a ResourceClaim for `gpu.gpupool.io` asks, decoded once at the edge into values. Pure.

`check_claim_spec` reads a claim's (or a ResourceClaimTemplate's) spec: what it asks of gpupool's
cards, refused with a message naming the fix when it names an unknown class, writes a capacity
gpupool does not read, or asks more memory than any card gives. The webhook runs it when a pod
naming such a claim is made, the controller's claim allocator again when it allocates, and the
node's DRA plugin reads consumed capacities with `read_memory` / `read_compute`. It lives here,
below the node side and the controllers, so that all of them can read claims the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpupool.adapters.wire.names import DRA_DRIVER
from gpupool.domain.dra_capacity import asked_memory
from gpupool.domain.errors import InvalidQuantity, InvalidRequest
from gpupool.domain.quantity import parse_quantity
from gpupool.domain.units import format_bytes, parse_bytes

COMPUTE_FULL = 100  # percent of the card's SMs

CAPACITY_MEMORY = "memory"
CAPACITY_COMPUTE = "compute"
CAPACITY_SHARES = "shares"
CAPACITIES = (CAPACITY_MEMORY, CAPACITY_COMPUTE, CAPACITY_SHARES)


class ClaimRefused(InvalidRequest):
    """A claim gpupool will not prepare or admit; the message names the claim and the fix."""


class MalformedCapacity(ClaimRefused):
    """A capacity request (or a consumed capacity) is not a quantity gpupool reads, or names a
    capacity the driver does not publish."""


class MemoryAboveEveryCard(ClaimRefused):
    """A claim asks more memory than any card gives to slices."""


class UnknownDeviceClass(ClaimRefused):
    """A claim names a DeviceClass that does not exist."""


@dataclass(frozen=True, slots=True)
class Ask:
    """One request of a claim on gpupool's class: per device, memory (None: a whole card's),
    compute percent (None: no hard cap), how many devices."""

    request: str
    memory_bytes: int | None
    compute_pct: int | None
    count: int


@dataclass(frozen=True, slots=True)
class CardOffer:
    """What one published card offers (for the memory check): its model and memory limit."""

    model: str
    memory_bytes: int


def capacity_name(key: str) -> str:
    """`memory` or `gpu.gpupool.io/memory` -> `memory`; other domains stay qualified."""
    prefix = f"{DRA_DRIVER}/"
    return key[len(prefix) :] if key.startswith(prefix) else key


def read_memory(value: object, where: str) -> int:
    try:
        return parse_bytes(value if isinstance(value, str | int) else repr(value), what=where)
    except InvalidQuantity:
        raise MalformedCapacity(
            f"{where} must be a positive byte quantity such as 12Gi; got {value!r}"
        ) from None


def read_compute(value: object, where: str, *, allow_zero: bool = False) -> int:
    try:
        exact = parse_quantity(value, what=where)
    except InvalidQuantity:
        exact = None
    low = 0 if allow_zero else 1
    if exact is None or exact.denominator != 1 or not low <= exact <= COMPUTE_FULL:
        raise MalformedCapacity(
            f"{where} is a whole percentage of the card's SMs from {low} to {COMPUTE_FULL}, "
            f"such as 30; got {value!r}"
        )
    return int(exact)


def _capacities(requests: Mapping[str, Any], where: str) -> tuple[int | None, int | None]:
    memory: int | None = None
    compute: int | None = None
    for key, value in requests.items():
        name = capacity_name(str(key))
        at = f"{where}: capacity.requests.{key}"
        if name == CAPACITY_MEMORY:
            memory = asked_memory(read_memory(value, at))  # as consumed: whole steps
        elif name == CAPACITY_COMPUTE:
            compute = read_compute(value, at)
        elif name == CAPACITY_SHARES:
            if str(value).strip() != "1":
                raise MalformedCapacity(
                    f"{at}: every claim takes exactly one share of a card; leave `shares` out "
                    f"(got {value!r})"
                )
        else:
            raise MalformedCapacity(
                f"{at}: {DRA_DRIVER} publishes no capacity {key!r}; ask for "
                f"{', '.join(CAPACITIES[:2])} (such as memory: 12Gi, compute: 30)"
            )
    return memory, compute


def _requests(spec: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(name, exactly-or-subrequest) of every request, `request/subrequest` for firstAvailable."""
    devices = spec.get("devices") or {}
    out: list[tuple[str, Mapping[str, Any]]] = []
    for request in devices.get("requests") or []:
        name = str(request.get("name", ""))
        if request.get("exactly") is not None:
            out.append((name, request["exactly"]))
        for sub in request.get("firstAvailable") or []:
            out.append((f"{name}/{sub.get('name', '')}", sub))
    return out


def check_claim_spec(
    spec: Mapping[str, Any],
    cards: Sequence[CardOffer],
    known_classes: Sequence[str] = (DRA_DRIVER,),
    who: str = "claim",
) -> tuple[Ask, ...]:
    """The asks of a ResourceClaim spec on gpupool's class, checked against the published cards.

    `known_classes` are the DeviceClasses that exist (gpupool's and any other); a request naming
    a class outside them is refused, since the scheduler would leave the pod pending. Requests
    on other classes are not gpupool's to check.
    """
    asks: list[Ask] = []
    for name, request in _requests(spec):
        where = f"{who}: request {name!r}"
        cls = str(request.get("deviceClassName", ""))
        if cls not in known_classes:
            raise UnknownDeviceClass(
                f"{where}: device class {cls!r} does not exist; gpupool's GPUs are "
                f"deviceClassName: {DRA_DRIVER}"
            )
        if cls != DRA_DRIVER:
            continue
        capacity = request.get("capacity") or {}
        if not isinstance(capacity, Mapping) or not isinstance(
            capacity.get("requests") or {}, Mapping
        ):
            raise MalformedCapacity(
                f"{where}: capacity must be {{requests: {{memory: 12Gi, compute: 30}}}}; "
                f"got {capacity!r}"
            )
        memory, compute = _capacities(capacity.get("requests") or {}, where)
        mode = request.get("allocationMode") or "ExactCount"
        count = int(request.get("count") or 1) if mode == "ExactCount" else 0
        if memory is not None and cards:
            largest = max(cards, key=lambda c: c.memory_bytes)
            if memory > largest.memory_bytes:
                raise MemoryAboveEveryCard(
                    f"{where}: asks for {format_bytes(memory)} of GPU memory but the largest "
                    f"card gives {format_bytes(largest.memory_bytes)} ({largest.model}); ask "
                    f"for at most {format_bytes(largest.memory_bytes)} per device, or for more "
                    f"devices (count) and split the work"
                )
        asks.append(Ask(name, memory, compute, count))
    return tuple(asks)
