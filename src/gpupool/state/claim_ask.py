"""What a claim pod's claim on gpu.gpupool.io asks (`gpupool.io/claim`, written by the webhook):
a value of the pod's (`state.pods.PodView.claim_ask`), read by the claim allocator.

The wire form and its readers are `adapters.wire.claim_request`."""

from __future__ import annotations

from dataclasses import dataclass


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
