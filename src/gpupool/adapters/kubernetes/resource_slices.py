"""ResourceSlice JSON (resource.k8s.io/v1) → what the claim allocator needs of it: the nodes
whose slice of gpupool's DRA driver lists devices (the slice's pool is the node)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpupool.adapters.wire import names


def publishing_nodes(slices: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    out = set()
    for item in slices:
        spec = item.get("spec") or {}
        if spec.get("driver") == names.DRA_DRIVER and spec.get("nodeName") and spec.get("devices"):
            out.add(str(spec["nodeName"]))
    return frozenset(out)
