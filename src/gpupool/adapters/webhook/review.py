"""AdmissionReview v1 in and out, pure: what to answer for a pod or a GpuQuota.

`parse_review` decodes the body once into an `AdmissionRequest`; every answer is an
AdmissionReview with `allowed` true or false; bad input becomes a denial whose message names what
to fix (the apiserver shows it as `admission webhook "..." denied the request: <message>`), never
an HTTP error. Only a body that is not an AdmissionReview at all gets a 400.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.adapters.webhook.mutate import UNKNOWN_CLUSTER, ClusterFacts, PodMutation, mutate_pod
from gpupool.adapters.webhook.shape import check_pod, check_quota
from gpupool.adapters.wire.quotas import check_with_others, read_quota
from gpupool.domain.errors import GpupoolError
from gpupool.quota.spec import TenantQuota

API_VERSION = "admission.k8s.io/v1"


class MalformedReview(GpupoolError):
    """The body is not an AdmissionReview v1 request."""


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """The parts of an AdmissionReview request the webhook reads."""

    uid: str
    operation: str  # CREATE, UPDATE, DELETE or CONNECT; "" when absent
    namespace: str
    object: Mapping[str, Any] | None


def _text(request: Mapping[str, Any], key: str) -> str:
    value = request.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise MalformedReview(f"the AdmissionReview request's {key} must be a string")
    return value


def parse_review(body: bytes) -> AdmissionRequest:
    """The request of an AdmissionReview body; MalformedReview if it is not one."""
    try:
        review = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise MalformedReview("the body is not JSON") from None
    if not isinstance(review, dict) or review.get("kind") != "AdmissionReview":
        raise MalformedReview('expected a JSON object with "kind": "AdmissionReview"')
    if review.get("apiVersion") != API_VERSION:
        raise MalformedReview(
            f"expected apiVersion {API_VERSION} (set admissionReviewVersions: [v1] in the "
            f"webhook configuration)"
        )
    request = review.get("request")
    if not isinstance(request, dict) or not isinstance(request.get("uid"), str):
        raise MalformedReview("the AdmissionReview has no request with a uid")
    obj = request.get("object")
    if obj is not None and not isinstance(obj, dict):
        raise MalformedReview("the AdmissionReview request's object must be a JSON object")
    return AdmissionRequest(
        uid=request["uid"],
        operation=_text(request, "operation"),
        namespace=_text(request, "namespace"),
        object=obj,
    )


def answer(
    uid: str,
    *,
    allowed: bool,
    message: str = "",
    code: int | None = None,
    patch: list[dict[str, Any]] | None = None,
    warnings: Iterable[str] = (),
) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if not allowed:
        response["status"] = {
            "code": code or 400,
            "reason": "Invalid" if (code or 400) in (400, 422) else "InternalError",
            "message": message,
        }
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode("ascii")
    warn = list(warnings)
    if warn:
        response["warnings"] = warn
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}


def _object(request: AdmissionRequest) -> Mapping[str, Any]:
    if request.object is None:
        raise MalformedReview("the AdmissionReview request has no object")
    return request.object


Denied = Callable[[str], None]  # told why a request is denied: the error's kind, for /metrics


def _nobody(_: str) -> None:
    return None


def review_pod(
    request: AdmissionRequest,
    namespace_labels: Mapping[str, str],
    queued_at: str,
    cluster: ClusterFacts = UNKNOWN_CLUSTER,
    denied: Denied = _nobody,
) -> dict[str, Any]:
    """The mutating answer for a pod: create gets validated and normalised; else allowed."""
    return reviewed_pod(request, namespace_labels, queued_at, cluster, denied)[0]


def reviewed_pod(
    request: AdmissionRequest,
    namespace_labels: Mapping[str, str],
    queued_at: str,
    cluster: ClusterFacts = UNKNOWN_CLUSTER,
    denied: Denied = _nobody,
) -> tuple[dict[str, Any], PodMutation | None]:
    """`review_pod`'s answer, and the mutation of a pod it allows on create (None otherwise):
    what the server tells of afterwards (the translation's Events)."""
    if request.operation != "CREATE":
        return answer(request.uid, allowed=True), None
    try:
        pod = dict(_object(request))
        check_pod(pod)
        meta = pod.get("metadata") or {}
        if not meta.get("namespace") and request.namespace:
            pod["metadata"] = {**meta, "namespace": request.namespace}
        mutation = mutate_pod(pod, namespace_labels, queued_at, cluster, review=request.uid)
    except GpupoolError as err:
        denied(type(err).__name__)
        return answer(request.uid, allowed=False, message=str(err)), None
    body = answer(request.uid, allowed=True, patch=mutation.patch, warnings=mutation.warnings)
    return body, mutation


def review_quota(
    request: AdmissionRequest, others: Iterable[TenantQuota], denied: Denied = _nobody
) -> dict[str, Any]:
    """The validating answer for a GpuQuota create or update."""
    if request.operation not in ("CREATE", "UPDATE"):
        return answer(request.uid, allowed=True)
    try:
        quota = _object(request)
        check_quota(quota)
        check_with_others(read_quota(quota), others)
    except GpupoolError as err:
        denied(type(err).__name__)
        return answer(request.uid, allowed=False, message=str(err))
    return answer(request.uid, allowed=True)
