"""Pods that ask for their GPU with a ResourceClaim on `gpu.gpupool.io`, pure: which claims a pod
names, what they ask (`wire.claim_request.claim_ask`, refused with a message naming the fix),
and the patch that makes such a pod gpupool's: the tenant label, `gpupool.io/queued-at`, the ask
as `gpupool.io/claim` and the quota scheduling gate, exactly as an extended-resource GPU pod
gets them (but no `gpupool.io/vgpu`: its card comes through the claim, which the controller's
claim allocator allocates when the quota gate lifts).

A claim on any other class is another driver's and left alone; a pod with no claim on gpupool's
class passes unchanged. The server looks the claims up (`PodClaim.spec`) before `mutate_pod`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpupool.adapters.webhook.cards import Card
from gpupool.adapters.wire.claim_request import ClaimAsk, claim_ask
from gpupool.adapters.wire.claims import CardOffer, ClaimRefused

TEMPLATE = "ResourceClaimTemplate"
CLAIM = "ResourceClaim"


@dataclass(frozen=True, slots=True)
class PodClaim:
    """One entry of the pod's `spec.resourceClaims`: its name, the kind and name of the object it
    names, and that object's spec (a template's `spec.spec`, a claim's `spec`; None: not found)."""

    entry: str
    kind: str
    name: str
    spec: Mapping[str, Any] | None = None


def claim_refs(pod: Mapping[str, Any]) -> tuple[PodClaim, ...]:
    """The claims the pod names, specs not yet looked up."""
    out: list[PodClaim] = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or ():
        if not isinstance(entry, Mapping):
            continue
        name = str(entry.get("name", ""))
        if entry.get("resourceClaimTemplateName"):
            out.append(PodClaim(name, TEMPLATE, str(entry["resourceClaimTemplateName"])))
        elif entry.get("resourceClaimName"):
            out.append(PodClaim(name, CLAIM, str(entry["resourceClaimName"])))
    return tuple(out)


def pod_claim_ask(
    claims: Sequence[PodClaim], cards: Sequence[Card], namespace: str
) -> ClaimAsk | None:
    """What the pod's claims ask of gpupool (None: no claim on its class)."""
    offers = [CardOffer(c.model, c.allocatable_bytes) for c in cards]
    found: list[ClaimAsk] = []
    for claim in claims:
        who = f"{claim.kind} {namespace}/{claim.name}"
        if claim.spec is None:
            raise ClaimRefused(
                f"the pod's claim {claim.entry!r} names {who}, which does not exist; create it "
                f"before the pod (gpupool reads it to count the pod against its tenant's quota)"
            )
        ask = claim_ask(claim.entry, claim.spec, offers, who)
        if ask is not None:
            found.append(ask)
    if len(found) > 1:
        raise ClaimRefused(
            f"the pod names {len(found)} claims on gpupool's GPUs "
            f"({', '.join(a.pod_claim for a in found)}); gpupool places one per pod: ask for "
            f"the cards in one claim (count: N)"
        )
    return found[0] if found else None
