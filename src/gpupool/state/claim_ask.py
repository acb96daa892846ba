"""What a claim pod's claim on gpu.gpupool.io asks (`gpupool.io/claim`, written by the webhook):
a value of the pod's (`state.pods.PodView.claim_ask`), read by the claim allocator; and the
ResourceClaim as the allocator reads it (`ClaimObject`, decoded by the adapter).

The wire form and its readers are `adapters.wire.claim_request`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.domain.errors import GpupoolError


@dataclass(frozen=True, slots=True)
class ClaimAsk:
    """What a pod's claim on gpupool's class asks: the pod's claim entry (`spec.resourceClaims[].
    name`), the claim's request name, per card memory (None: the whole card) and compute percent
    (None: no hard cap), how many cards, and the models allowed (): any)."""

    pod_claim: str
    request: str
    memory_bytes: int | None
    compute_pct: int | None
    count: int
    models: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ClaimObject:
    """A ResourceClaim as the claim allocator reads it: what its spec asks of gpupool's class
    (`ask`, its `pod_claim` left ""; None when no request names the class, or `refusal` says why
    the spec cannot be read as an ask: its message names the fix), whether it is allocated
    already, and its opaque configs for gpupool's driver (copied into the allocation)."""

    namespace: str
    name: str
    uid: str
    ask: ClaimAsk | None
    refusal: GpupoolError | None
    allocated: bool
    configs: tuple[Mapping[str, Any], ...] = ()
