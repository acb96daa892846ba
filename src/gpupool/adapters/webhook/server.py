"""The admission webhook's HTTPS server (aiohttp): it parses, calls the pure decisions, answers.

Routes (all POST an AdmissionReview v1 and get one back):
- `/mutate/pods`: validate and normalise GPU pods, stamp the tenant, add vgpu and the quota gate;
- `/validate/gpuquotas`: a GpuQuota must make sense alone and with the other tenants' quotas;
- `GET /healthz`.
A body that is not an AdmissionReview gets HTTP 400; anything else, even a bug or an unreachable
apiserver, is answered as a denial with a message of ours (HTTP 200), never a 500 and never
Python's own words (a bug's details go to the log, under the request's uid).

What gpupool stamped on a pod is kept on update by the pod-integrity policy (`policy.py`), which
the API server evaluates itself: no webhook call, so no pod update waits for this server.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any, Protocol

import httpx2
from aiohttp import web

from gpupool.adapters.metrics.webhook import WebhookMetrics
from gpupool.adapters.webhook.cards import Card
from gpupool.adapters.webhook.certs import ServingCert
from gpupool.adapters.webhook.claims import PodClaim, claim_refs
from gpupool.adapters.webhook.events import TranslationEvents, notice_of
from gpupool.adapters.webhook.gang import GangMember, read_member
from gpupool.adapters.webhook.lookups import why
from gpupool.adapters.webhook.mutate import DEFAULT_SCHEDULER, ClusterFacts, tenant_of
from gpupool.adapters.webhook.review import (
    AdmissionRequest,
    Denied,
    MalformedReview,
    answer,
    parse_review,
    review_quota,
    reviewed_pod,
)
from gpupool.adapters.wire import names
from gpupool.ports import Clock
from gpupool.quota.spec import TenantQuota
from gpupool.rfc3339 import format_time

log = logging.getLogger("gpupool.webhook")

MUTATE_PODS = "/mutate/pods"
VALIDATE_QUOTAS = "/validate/gpuquotas"


class Lookups(Protocol):
    """What the webhook reads from the API server."""

    async def namespace_labels(self, namespace: str) -> Mapping[str, str]: ...

    async def quotas(self) -> list[TenantQuota]:
        """Every readable GpuQuota (unreadable ones are skipped)."""
        ...

    async def cards(self) -> tuple[Card, ...]:
        """Every card the GpuNodes report (model, allocatable and whole memory)."""
        ...

    async def gang_members(self, namespace: str, gang: str) -> list[Mapping[str, Any]]:
        """The pods of `namespace` labelled `gpupool.io/gang: <gang>` (their JSON)."""
        ...

    async def lease_ttl(self, tenant: str) -> float | None:
        """The tenant's GpuQuota `leaseTTLSeconds` (None: no quota, or none set)."""
        ...

    async def claim_spec(self, namespace: str, kind: str, name: str) -> Mapping[str, Any] | None:
        """A ResourceClaimTemplate's `spec.spec` or a ResourceClaim's `spec` (None: not found)."""
        ...


def gang_label(pod: Mapping[str, Any] | None) -> str | None:
    """The gang a pod being created names, if any (a string label; anything else is left to
    `mutate_pod` to refuse)."""
    meta = (pod or {}).get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    value = labels.get(names.LABEL_GANG) if isinstance(labels, Mapping) else None
    return value if isinstance(value, str) and value and "/" not in value else None


Handler = Callable[[AdmissionRequest, Denied], Awaitable[dict[str, Any]]]


def _endpoint(
    handler: Handler, resource: str, metrics: WebhookMetrics | None
) -> Callable[[web.Request], Awaitable[web.Response]]:
    """`resource` names the route on /metrics (pods, gpuquotas); the handler tells `denied` why
    it denies, so each denial is counted by its reason."""

    def count(operation: str, result: str, started: float, reason: str | None) -> None:
        if metrics is not None:
            metrics.answered(resource, operation, result, time.perf_counter() - started, reason)

    async def serve(http: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            request = parse_review(await http.read())
        except MalformedReview as err:
            count("", "malformed", started, None)
            return web.json_response({"error": str(err)}, status=400)
        reasons: list[str] = []
        try:
            body = await handler(request, reasons.append)
        except Exception:  # never a 500 nor Python's words: deny in ours, log the cause
            log.exception("webhook %s failed for request %s", http.path, request.uid)
            count(request.operation, "error", started, "InternalError")
            return web.json_response(
                answer(
                    request.uid,
                    allowed=False,
                    code=500,
                    message=f"the gpupool webhook failed on this request (a bug: its log has "
                    f"the details under request {request.uid}); retry, and if it persists "
                    f"report it",
                )
            )
        allowed = bool(body["response"]["allowed"])
        reason = None if allowed else (reasons[0] if reasons else "Denied")
        count(request.operation, "allowed" if allowed else "denied", started, reason)
        return web.json_response(body)

    return serve


async def _lease_ttl(lookups: Lookups, pod: Mapping[str, Any] | None, tenant: str) -> float | None:
    """The tenant's lease TTL when the pod asks for its own (the only pods it bounds); None when
    the quota cannot be read: the controller cuts the pod's TTL to it all the same."""
    meta = (pod or {}).get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    if not isinstance(annotations, Mapping) or names.ANN_LEASE_TTL not in annotations:
        return None
    try:
        return await lookups.lease_ttl(tenant)
    except Exception as err:
        log.warning("cannot read tenant %s's GpuQuota, its lease TTL unchecked: %s", tenant, err)
        return None


async def _claims(
    lookups: Lookups, pod: Mapping[str, Any] | None, namespace: str
) -> tuple[PodClaim, ...]:
    """The pod's claims with their specs (a pod without claims reads nothing)."""
    out = []
    for ref in claim_refs(pod or {}):
        spec = await lookups.claim_spec(namespace, ref.kind, ref.name)
        out.append(replace(ref, spec=spec))
    return tuple(out)


async def _cards(lookups: Lookups) -> tuple[Card, ...]:
    try:
        return await lookups.cards()
    except Exception as err:  # the catalogue still bounds a request; the extender does the rest
        log.warning("cannot read GpuNodes, judging requests by the catalogue: %s", err)
        return ()


def build_app(
    lookups: Lookups,
    clock: Clock,
    schedulers: tuple[str, ...] = (DEFAULT_SCHEDULER,),
    metrics: WebhookMetrics | None = None,
    adopt_nvidia_gpu: bool = True,
    events: TranslationEvents | None = None,
) -> web.Application:
    """`adopt_nvidia_gpu`: pods asking for nvidia.com/gpu are gpupool's (`hami.py`); `events`
    records each translation as Events on the pod and its owner, after the answer."""

    async def mutate_pods(request: AdmissionRequest, denied: Denied) -> dict[str, Any]:
        if request.operation != "CREATE":
            return answer(request.uid, allowed=True)
        namespace = request.namespace
        try:
            labels = await lookups.namespace_labels(namespace)
        except Exception as err:
            log.warning("cannot read namespace %s: %s", namespace, err)
            denied("NamespaceUnreadable")
            return answer(
                request.uid,
                allowed=False,
                code=503,
                message=f"gpupool cannot read namespace {namespace!r} to find the pod's tenant "
                f"({why(err)}); retry",
            )
        gang = gang_label(request.object)
        members: tuple[GangMember, ...] = ()
        if gang:
            try:
                members = tuple(map(read_member, await lookups.gang_members(namespace, gang)))
            except Exception as err:
                log.warning("cannot list gang %s/%s: %s", namespace, gang, err)
                denied("GangUnreadable")
                return answer(
                    request.uid,
                    allowed=False,
                    code=503,
                    message=f"gpupool cannot list the members of gang {gang!r} in namespace "
                    f"{namespace!r} to check this pod against them ({why(err)}); retry",
                )
        try:
            claims = await _claims(lookups, request.object, namespace)
        except Exception as err:
            log.warning("cannot read the claims of a pod in %s: %s", namespace, err)
            denied("ClaimUnreadable")
            return answer(
                request.uid,
                allowed=False,
                code=503,
                message=f"gpupool cannot read the pod's ResourceClaims or ResourceClaimTemplates "
                f"in namespace {namespace!r} to see whether they ask for its GPUs ({why(err)}); "
                f"retry",
            )
        cluster = ClusterFacts(
            claims=claims,
            cards=await _cards(lookups),
            schedulers=schedulers,
            gang_members=members,
            adopt_nvidia_gpu=adopt_nvidia_gpu,
            tenant_lease_ttl_s=await _lease_ttl(lookups, request.object, tenant_of(labels)),
        )
        body, mutation = reviewed_pod(request, labels, format_time(clock()), cluster, denied)
        if events is not None and mutation is not None and mutation.translated:
            try:  # after the answer, never on its path: a failure is only logged
                notice = notice_of(
                    request.object or {}, namespace, request.uid, mutation.translated
                )
                events.record(notice)
            except Exception:
                log.exception("cannot schedule the translation Events of %s", request.uid)
        return body

    async def validate_quotas(request: AdmissionRequest, denied: Denied) -> dict[str, Any]:
        if request.operation not in ("CREATE", "UPDATE"):
            return review_quota(request, (), denied)
        try:
            others = await lookups.quotas()
        except (OSError, httpx2.HTTPError) as err:  # unreachable; anything else is a bug
            log.warning("cannot list GpuQuotas: %s", err)
            denied("QuotasUnreadable")
            return answer(
                request.uid,
                allowed=False,
                code=503,
                message="gpupool cannot list the other GpuQuotas to check this one against "
                f"their cohorts ({why(err)}); retry",
            )
        return review_quota(request, others, denied)

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=8 * 1024 * 1024)
    app.router.add_post(MUTATE_PODS, _endpoint(mutate_pods, "pods", metrics))
    app.router.add_post(VALIDATE_QUOTAS, _endpoint(validate_quotas, "gpuquotas", metrics))
    app.router.add_get("/healthz", healthz)
    return app


def tls_context(cert: ServingCert) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert.cert), str(cert.key))
    return context


async def serve(app: web.Application, host: str, port: int, cert: ServingCert) -> web.AppRunner:
    """Start serving; the caller keeps the runner and calls `cleanup()` to stop."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=tls_context(cert))
    await site.start()
    return runner
