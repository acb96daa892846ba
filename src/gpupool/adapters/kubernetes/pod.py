"""The `gpupool.io/allocation` annotation: written from an Allocation, read back into slices.

(A pod's GPU request is read once, by `gpupool.adapters.wire.pods.read_pod_gpu`, inside the one
pod decoder, `pod_view.read_pod`, which the extender and the controllers share.)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gpupool.domain.allocations import Allocation, Slice, extents_from_json
from gpupool.domain.errors import InvalidRequest


def allocation_annotation(allocation: Allocation) -> str:
    """The `gpupool.io/allocation` annotation: a JSON list, one object per GPU."""
    return json.dumps([s.to_annotation() for s in allocation.slices], separators=(",", ":"))


def _slice_of(item: Mapping[str, Any]) -> Slice:
    offset, size = int(item["offsetBytes"]), int(item["sizeBytes"])
    return Slice(
        gpu_index=int(item["index"]),
        uuid=str(item["uuid"]),
        model=str(item["model"]),
        offset_bytes=offset,
        size_bytes=size,
        compute_milli=int(item.get("computePercent", 0)) * 10,
        extents=extents_from_json(item.get("extents"), offset, size),
    )


def slices_from_annotation(text: str, *, who: str = "pod") -> tuple[Slice, ...]:
    """Parse a `gpupool.io/allocation` annotation back into slices."""
    try:
        items = json.loads(text)
        return tuple(_slice_of(item) for item in items)
    except (ValueError, TypeError, KeyError) as err:
        raise InvalidRequest(f"{who}: malformed gpupool.io/allocation annotation: {err}") from None
