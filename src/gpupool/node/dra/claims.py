"""ResourceClaims for `gpu.gpupool.io`, decoded once at the edge into values. Pure.

Two readings:

- `check_claim_spec`: what a claim (or a ResourceClaimTemplate's spec) asks of gpupool's cards,
  refused with a message naming the fix when it names an unknown class, writes a capacity
  gpupool does not read, or asks more memory than any card gives (the checks a webhook or
  `kubectl gpupool` can run before the scheduler leaves the pod pending without a word);
- `read_allocated_claim`: what the scheduler allocated to a claim on this driver
  (`status.allocation.devices.results[]` with `consumedCapacity`), for NodePrepareResources.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpupool.adapters.wire.names import DRA_DRIVER
from gpupool.domain.errors import InvalidQuantity
from gpupool.domain.quantity import parse_quantity
from gpupool.domain.units import format_bytes, parse_bytes
from gpupool.node.dra.errors import (
    ClaimNotServable,
    MalformedCapacity,
    MemoryAboveEveryCard,
    UnknownDeviceClass,
)
from gpupool.node.dra.slices import (
    CAPACITIES,
    CAPACITY_COMPUTE,
    CAPACITY_MEMORY,
    CAPACITY_SHARES,
    COMPUTE_FULL,
)

MPS = "mps"
NO_MPS = "none"
COMPUTE_MODE_KEY = "computeMode"  # in the claim's opaque config for this driver


@dataclass(frozen=True, slots=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


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


def _capacity_name(key: str) -> str:
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
        name = _capacity_name(str(key))
        at = f"{where}: capacity.requests.{key}"
        if name == CAPACITY_MEMORY:
            memory = read_memory(value, at)
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


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One result of the claim's allocation on this driver."""

    request: str
    pool: str
    device: str
    share_id: str | None
    memory_bytes: int | None  # consumed; None: not recorded (the whole card's)
    compute_pct: int | None  # consumed; None or 0: no hard cap


@dataclass(frozen=True, slots=True)
class AllocatedClaim:
    ref: ClaimRef
    devices: tuple[AllocatedDevice, ...]
    compute_mode: str | None  # "mps" | "none" | None, from the claim's opaque config
    pod: str  # namespace/name of the first pod it is reserved for ("" when none)
    pod_uid: str


def _compute_mode(allocation: Mapping[str, Any], ref: ClaimRef) -> str | None:
    mode: str | None = None
    for entry in (allocation.get("devices") or {}).get("config") or []:
        opaque = entry.get("opaque") or {}
        if opaque.get("driver") != DRA_DRIVER:
            continue
        parameters = opaque.get("parameters") or {}
        value = parameters.get(COMPUTE_MODE_KEY) if isinstance(parameters, Mapping) else None
        if value is None:
            continue
        if value not in (MPS, NO_MPS):
            raise MalformedCapacity(
                f"claim {ref}: opaque config for {DRA_DRIVER} has {COMPUTE_MODE_KEY}: {value!r}; "
                f"write {MPS!r} or {NO_MPS!r}"
            )
        mode = str(value)
    return mode


def read_allocated_claim(claim: Mapping[str, Any], uid: str) -> AllocatedClaim:
    """The claim object as the API server returns it, for the claim the kubelet named by `uid`."""
    meta = claim.get("metadata") or {}
    ref = ClaimRef(str(meta.get("namespace", "")), str(meta.get("name", "")), str(meta.get("uid")))
    if ref.uid != uid:
        raise ClaimNotServable(
            f"claim {ref} is now uid {ref.uid}, not {uid} that the kubelet asked for: it was "
            f"deleted and made again; the pod must be created again too"
        )
    status = claim.get("status") or {}
    allocation = status.get("allocation")
    if not allocation:
        raise ClaimNotServable(f"claim {ref} is not allocated yet; the kubelet asked too early")
    devices: list[AllocatedDevice] = []
    for result in (allocation.get("devices") or {}).get("results") or []:
        if result.get("driver") != DRA_DRIVER:
            continue
        where = f"claim {ref}: device {result.get('device')!r}: consumedCapacity"
        consumed = {
            _capacity_name(str(k)): v for k, v in (result.get("consumedCapacity") or {}).items()
        }
        memory = consumed.get(CAPACITY_MEMORY)
        compute = consumed.get(CAPACITY_COMPUTE)
        share = result.get("shareID")
        devices.append(
            AllocatedDevice(
                request=str(result.get("request", "")),
                pool=str(result.get("pool", "")),
                device=str(result.get("device", "")),
                share_id=str(share) if share else None,
                memory_bytes=None if memory is None else read_memory(memory, f"{where}.memory"),
                compute_pct=None
                if compute is None
                else read_compute(compute, f"{where}.compute", allow_zero=True),
            )
        )
    reserved = [r for r in status.get("reservedFor") or [] if r.get("resource") == "pods"]
    pod = f"{ref.namespace}/{reserved[0].get('name')}" if reserved else ""
    pod_uid = str(reserved[0].get("uid", "")) if reserved else ""
    return AllocatedClaim(ref, tuple(devices), _compute_mode(allocation, ref), pod, pod_uid)
