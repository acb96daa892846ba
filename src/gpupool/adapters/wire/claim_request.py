"""A pod's claim on `gpu.gpupool.io` as gpupool's own request, pure.

A claim pod asks for its GPU with a ResourceClaim (or a ResourceClaimTemplate) instead of
`gpupool.io/vgpu`; the admission queue, the leases and reclaim count it as the same
extended-resource pod would be counted. `claim_ask` reads the claim's spec once
(`check_claim_spec`, then the parts gpupool's own allocator must honour): exactly one request on
gpupool's class, `ExactCount`, its memory and compute per card, and the models its CEL selectors
name. gpupool allocates these claims itself (the controller's claim allocator), so it must
understand every selector it is given: a selector it cannot read is refused rather than ignored,
since ignoring it could put the claim on a card it excludes. `request_of` is the `Request` the
placement core and the quota core take.

The webhook writes the ask on the pod (`gpupool.io/claim`, `to_annotation`) when it is made,
so the controllers read it with the rest of the pod (`adapters.kubernetes.pod_view`) without
reading the claim; the allocator reads the claim again when it allocates and refuses one that
no longer asks the same.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from gpupool.adapters.wire.claims import CardOffer, ClaimRefused, check_claim_spec
from gpupool.adapters.wire.names import DRA_DRIVER
from gpupool.domain.errors import GpupoolError
from gpupool.domain.models import get_model
from gpupool.domain.requests import Request
from gpupool.state.claim_ask import ClaimAsk as ClaimAsk  # its home is state

_ATTR = rf"""device\.attributes\[\s*['"]{re.escape(DRA_DRIVER)}['"]\s*\]\.model"""
_NAME = r"""['"]([^'"]+)['"]"""
_EQUALS = re.compile(rf"^\s*{_ATTR}\s*==\s*{_NAME}\s*$")
_IN = re.compile(rf"^\s*{_ATTR}\s+in\s+\[([^\]]*)\]\s*$")
_ITEM = re.compile(_NAME)

SELECTOR_FORMS = (
    f"device.attributes['{DRA_DRIVER}'].model == 'A100-80GB'",
    f"device.attributes['{DRA_DRIVER}'].model in ['A100-80GB', 'H100-80GB']",
)


def looks_like_ours(device_class: str) -> bool:
    """A class name that is not gpupool's but names it (`gpu.gpupool`, `gpupool.io`): a typo the
    scheduler would leave pending forever, refused rather than passed on as another driver's."""
    return device_class != DRA_DRIVER and "gpupool" in device_class.lower()


def selector_models(selectors: Sequence[Any], where: str) -> tuple[str, ...]:
    """The models the request's CEL selectors allow (every selector must hold, so the models are
    their intersection); () when there is none."""
    allowed: set[str] | None = None
    for selector in selectors:
        cel = selector.get("cel") if isinstance(selector, Mapping) else None
        expression = cel.get("expression") if isinstance(cel, Mapping) else None
        if not isinstance(expression, str):
            raise ClaimRefused(
                f"{where}: gpupool reads only CEL selectors ({{cel: {{expression: ...}}}}); "
                f"got {selector!r}"
            )
        names = _models_in(expression)
        if names is None:
            raise ClaimRefused(
                f"{where}: gpupool places this claim itself and reads only selectors on the "
                f"card model, such as {SELECTOR_FORMS[0]!r} or {SELECTOR_FORMS[1]!r}; got "
                f"{expression!r}: write the models that way, or remove the selector"
            )
        try:
            canonical = {get_model(n).name for n in names}
        except GpupoolError as err:
            raise ClaimRefused(f"{where}: selector {expression!r}: {err}") from None
        allowed = canonical if allowed is None else allowed & canonical
        if not allowed:
            raise ClaimRefused(
                f"{where}: its selectors together allow no card model; keep one selector"
            )
    return tuple(sorted(allowed or ()))


def _models_in(expression: str) -> list[str] | None:
    match = _EQUALS.match(expression)
    if match:
        return [match.group(1)]
    match = _IN.match(expression)
    if match:
        items = _ITEM.findall(match.group(1))
        return items or None
    return None


def _ours(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    devices = spec.get("devices") if isinstance(spec, Mapping) else None
    requests = devices.get("requests") if isinstance(devices, Mapping) else None
    return [r for r in requests or () if isinstance(r, Mapping)]


def claim_ask(
    pod_claim: str, spec: Mapping[str, Any], cards: Sequence[CardOffer], who: str
) -> ClaimAsk | None:
    """What a claim spec asks of gpupool, or None when no request of it names gpupool's class.

    Other classes are other drivers' (left to kube-scheduler), except a name that looks like
    gpupool's misspelt (`looks_like_ours`), refused with the right name. Raises a ClaimRefused
    whose message names the fix."""
    requests = _ours(spec)
    classes = set()
    for request in requests:
        for part in [request.get("exactly"), *(request.get("firstAvailable") or ())]:
            if isinstance(part, Mapping):
                classes.add(str(part.get("deviceClassName", "")))
    known = (DRA_DRIVER, *sorted(c for c in classes if not looks_like_ours(c)))
    asks = check_claim_spec(spec, cards, known, who)
    if not asks:
        return None
    for request in requests:
        firsts = request.get("firstAvailable") or ()
        if any(isinstance(f, Mapping) and f.get("deviceClassName") == DRA_DRIVER for f in firsts):
            raise ClaimRefused(
                f"{who}: request {request.get('name')!r}: gpupool places its claims itself and "
                f"does not read firstAvailable; ask with `exactly` (one model list, one size)"
            )
    if len(asks) > 1:
        raise ClaimRefused(
            f"{who}: asks for gpupool's GPUs in {len(asks)} requests "
            f"({', '.join(a.request for a in asks)}); gpupool places one request per claim: "
            f"ask for the cards in one request with count: N"
        )
    ask = asks[0]
    if ask.count < 1:
        raise ClaimRefused(
            f"{who}: request {ask.request!r}: allocationMode All would take every card of a "
            f"node outside any quota; ask for a number of cards (allocationMode: ExactCount, "
            f"count: N)"
        )
    exactly = next(r.get("exactly") for r in requests if r.get("name") == ask.request)
    selectors = exactly.get("selectors") or () if isinstance(exactly, Mapping) else ()
    models = selector_models(selectors, f"{who}: request {ask.request!r}")
    return ClaimAsk(pod_claim, ask.request, ask.memory_bytes, ask.compute_pct, ask.count, models)


def request_of(ask: ClaimAsk, name: str, tenant: str, priority: int) -> Request:
    """The request the placement and quota cores take for the claim: `count` cards, each with
    `memory_bytes` (a whole card without it) and a `compute_pct` cap, on the models allowed."""
    return Request(
        name=name,
        gpu_count=ask.count,
        gpu_memory_bytes=ask.memory_bytes,
        compute_pct=ask.compute_pct,
        models=ask.models,
        tenant=tenant,
        priority=priority,
    )


def to_annotation(ask: ClaimAsk) -> str:
    return json.dumps(
        {
            "claim": ask.pod_claim,
            "request": ask.request,
            "memory": ask.memory_bytes,
            "compute": ask.compute_pct,
            "count": ask.count,
            "models": list(ask.models),
        },
        sort_keys=True,
    )


def from_annotation(text: str, who: str) -> ClaimAsk:
    """The ask the webhook wrote (`to_annotation`); ClaimRefused if it is not one."""
    try:
        data = json.loads(text)
        memory, compute = data["memory"], data["compute"]
        ask = ClaimAsk(
            pod_claim=str(data["claim"]),
            request=str(data["request"]),
            memory_bytes=None if memory is None else int(memory),
            compute_pct=None if compute is None else int(compute),
            count=int(data["count"]),
            models=tuple(str(m) for m in data.get("models") or ()),
        )
    except (ValueError, TypeError, KeyError, AttributeError):
        raise ClaimRefused(
            f"{who}: annotation gpupool.io/claim is not what gpupool's webhook writes; create "
            f"the pod again (the webhook writes it)"
        ) from None
    return ask
