"""resource.k8s.io/v1 JSON → what the claim allocator reads of it: a ResourceClaim as a
`ClaimObject` (its ask of gpupool's class, read by `adapters.wire.claim_request`), and of the
ResourceSlices the nodes whose slice of gpupool's DRA driver lists devices (its pool is the
node)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpupool.adapters.wire import names
from gpupool.adapters.wire.claim_request import claim_ask
from gpupool.domain.errors import GpupoolError
from gpupool.state.claim_ask import ClaimAsk, ClaimObject


def read_claim(claim: Mapping[str, Any]) -> ClaimObject:
    meta = claim.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    ask: ClaimAsk | None = None
    refusal: GpupoolError | None = None
    try:
        ask = claim_ask("", claim.get("spec") or {}, (), f"ResourceClaim {namespace}/{name}")
    except GpupoolError as err:
        refusal = err
    devices = (claim.get("spec") or {}).get("devices") or {}
    configs = tuple(
        c
        for c in devices.get("config") or ()
        if (c.get("opaque") or {}).get("driver") == names.DRA_DRIVER
    )
    allocated = bool((claim.get("status") or {}).get("allocation"))
    return ClaimObject(namespace, name, str(meta.get("uid") or ""), ask, refusal, allocated,
                       configs)  # fmt: skip


def publishing_nodes(slices: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    out = set()
    for item in slices:
        spec = item.get("spec") or {}
        if spec.get("driver") == names.DRA_DRIVER and spec.get("nodeName") and spec.get("devices"):
            out.add(str(spec["nodeName"]))
    return frozenset(out)
