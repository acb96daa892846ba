"""Where a request landed: a node and, per GPU, the slice it holds.

A slice's logical layout on its card is a list of extents, (offset, size) byte ranges. Memory on a
card is fungible (the limiter caps bytes, not addresses), so the layout is bookkeeping: the live
slices on a card never share a byte of it. Normally a slice is one extent; when the card's free
bytes are fragmented into ranges each shorter than the slice, `lay_out` spreads it over several.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Extent = tuple[int, int]  # (offset, size) in bytes on one card's logical range
MAX_EXTENTS = 256  # the GpuLease CRD's maxItems for a slice's extents


@dataclass(frozen=True, slots=True)
class Slice:
    gpu_index: int
    uuid: str
    model: str
    offset_bytes: int  # where the slice starts: its first extent's offset
    size_bytes: int
    compute_milli: int  # share of SMs reserved, 0..1000 (0: no hard cap)
    # The layout when split over several ranges (ascending, disjoint, sizes adding up to
    # size_bytes, the first at offset_bytes); () when it is the one range (offset, size).
    extents: tuple[Extent, ...] = ()

    @property
    def ranges(self) -> tuple[Extent, ...]:
        """The slice's extents, one or more."""
        return self.extents or ((self.offset_bytes, self.size_bytes),)

    def to_annotation(self) -> dict[str, object]:
        """The per-GPU object of the `gpupool.io/allocation` annotation (DESIGN section 3)."""
        return {
            "uuid": self.uuid,
            "index": self.gpu_index,
            "model": self.model,
            "offsetBytes": self.offset_bytes,
            "sizeBytes": self.size_bytes,
            "computePercent": self.compute_milli // 10,
            "extents": extents_to_json(self.ranges),
        }


def extents_to_json(extents: Iterable[Extent]) -> list[dict[str, int]]:
    return [{"offsetBytes": o, "sizeBytes": n} for o, n in extents]


def extents_from_json(value: object, offset: int, size: int) -> tuple[Extent, ...]:
    """A slice's `extents` as JSON gives them, normalised as `Slice.extents` keeps them (() for
    one range); absent (None): the one range (offset, size), as leases and annotations written
    before extents existed. ValueError if they are no layout of the slice."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ValueError(f"extents must be a list, got {type(value).__name__}")
    try:
        extents = tuple((int(e["offsetBytes"]), int(e["sizeBytes"])) for e in value)
    except (KeyError, TypeError) as err:
        raise ValueError(f"bad extents: {err!r}") from None
    problem = extents_problem(offset, size, extents)
    if problem is not None:
        raise ValueError(f"bad extents: {problem}")
    return extents if len(extents) > 1 else ()


def extents_problem(offset: int, size: int, extents: Sequence[Extent]) -> str | None:
    """Why `extents` is no layout of a slice of `size` bytes at `offset`, or None."""
    if not extents:
        return "extents is empty"
    if len(extents) > MAX_EXTENTS:
        return f"{len(extents)} extents, at most {MAX_EXTENTS}"
    if extents[0][0] != offset:
        return f"the first extent starts at {extents[0][0]}, offsetBytes is {offset}"
    end = 0
    for o, n in extents:
        if o < end:
            return f"extent [{o}, {o + n}) is not after the previous one (ending at {end})"
        if n < 1 and len(extents) > 1:
            return f"extent at {o} has size {n}"
        end = o + n
    total = sum(n for _, n in extents)
    if total != size:
        return f"extents add up to {total} bytes, sizeBytes is {size}"
    return None


def laid_out(s: Slice, extents: Sequence[Extent]) -> Slice:
    """`s` placed at `extents` (which add up to its size, ascending and disjoint)."""
    problem = extents_problem(extents[0][0] if extents else 0, s.size_bytes, extents)
    if problem is not None:
        raise ValueError(f"not a layout of a {s.size_bytes}-byte slice: {problem}")
    return Slice(
        gpu_index=s.gpu_index,
        uuid=s.uuid,
        model=s.model,
        offset_bytes=extents[0][0],
        size_bytes=s.size_bytes,
        compute_milli=s.compute_milli,
        extents=tuple(extents) if len(extents) > 1 else (),
    )


def free_ranges(taken: Iterable[Extent], capacity: int) -> list[Extent]:
    """The ranges of [0, capacity) that no (offset, size) in `taken` covers, lowest first
    (`taken` may overlap itself or reach past the capacity)."""
    out: list[Extent] = []
    at = 0
    for offset, length in sorted(taken):
        if offset > at and at < capacity:
            out.append((at, min(offset, capacity) - at))
        at = max(at, offset + length)
    if at < capacity:
        out.append((at, capacity - at))
    return out


def lay_out(taken: Iterable[Extent], size: int, capacity: int) -> tuple[Extent, ...] | None:
    """Where `size` bytes go on a card of `capacity` bytes beside the extents `taken`: the lowest
    free range long enough (one extent), else the free ranges lowest first, each filled, until
    `size` is covered (several extents). None when fewer than `size` bytes are free."""
    gaps = free_ranges(taken, capacity)
    if size <= 0:
        return ((gaps[0][0] if gaps else 0, size),)
    for offset, length in gaps:
        if length >= size:
            return ((offset, size),)
    out: list[Extent] = []
    need = size
    for offset, length in gaps:
        part = min(length, need)
        out.append((offset, part))
        need -= part
        if not need:
            return tuple(out)
    return None


@dataclass(frozen=True, slots=True)
class Allocation:
    request: str
    node: str
    cpu_milli: int
    memory_mib: int
    slices: tuple[Slice, ...]

    @property
    def gpu_memory_bytes(self) -> int:
        return sum(s.size_bytes for s in self.slices)
