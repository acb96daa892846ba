"""AdmissionReview v1 in and out, pure: what to answer for a pod or a GpuQuota.

Every answer is an AdmissionReview with `allowed` true or false; bad input becomes a denial whose
message names what to fix (the apiserver shows it as `admission webhook "..." denied the request:
<message>`), never an HTTP error. Only a body that is not an AdmissionReview at all gets a 400.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from typing import Any

from gpupool.adapters.webhook.mutate import mutate_pod
from gpupool.adapters.wire import names
from gpupool.adapters.wire.quotas import check_with_others, read_quota
from gpupool.domain.errors import GpupoolError
from gpupool.quota.spec import TenantQuota

API_VERSION = "admission.k8s.io/v1"


class MalformedReview(GpupoolError):
    """The body is not an AdmissionReview v1 request."""


def parse_review(body: bytes) -> Mapping[str, Any]:
    """The `request` of an AdmissionReview body; MalformedReview if it is not one."""
    try:
        review = json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        raise MalformedReview(f"the body is not JSON: {err}") from None
    if not isinstance(review, dict) or review.get("kind") != "AdmissionReview":
        raise MalformedReview('expected a JSON object with "kind": "AdmissionReview"')
    if review.get("apiVersion") != API_VERSION:
        raise MalformedReview(
            f"expected apiVersion {API_VERSION}; got {review.get('apiVersion')!r} "
            f"(set admissionReviewVersions: [v1] in the webhook configuration)"
        )
    request = review.get("request")
    if not isinstance(request, dict) or not isinstance(request.get("uid"), str):
        raise MalformedReview("the AdmissionReview has no request with a uid")
    return request


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


def _object(request: Mapping[str, Any]) -> Mapping[str, Any]:
    obj = request.get("object")
    if not isinstance(obj, dict):
        raise MalformedReview("the AdmissionReview request has no object")
    return obj


def review_pod(
    request: Mapping[str, Any], namespace_labels: Mapping[str, str], queued_at: str
) -> dict[str, Any]:
    """The mutating answer for a pod: create gets validated and normalised; else allowed."""
    uid = str(request["uid"])
    if request.get("operation") != "CREATE":
        return answer(uid, allowed=True)
    pod = dict(_object(request))
    if not (pod.get("metadata") or {}).get("namespace") and request.get("namespace"):
        pod["metadata"] = {**(pod.get("metadata") or {}), "namespace": request["namespace"]}
    try:
        mutation = mutate_pod(pod, namespace_labels, queued_at)
    except GpupoolError as err:
        return answer(uid, allowed=False, message=str(err))
    return answer(uid, allowed=True, patch=mutation.patch, warnings=mutation.warnings)


def review_pod_update(request: Mapping[str, Any]) -> dict[str, Any]:
    """The validating answer for a pod update: what gpupool stamped at creation stays."""
    uid = str(request["uid"])
    if request.get("operation") != "UPDATE":
        return answer(uid, allowed=True)
    new = _object(request)
    old = request.get("oldObject") or {}
    new_labels = (new.get("metadata") or {}).get("labels") or {}
    old_labels = (old.get("metadata") or {}).get("labels") or {}
    if names.LABEL_TENANT in old_labels and new_labels.get(names.LABEL_TENANT) != old_labels.get(
        names.LABEL_TENANT
    ):
        return answer(
            uid,
            allowed=False,
            message=(
                f"label {names.LABEL_TENANT} is set from the namespace when the pod is created "
                f"and cannot change (was {old_labels[names.LABEL_TENANT]!r})"
            ),
        )
    return answer(uid, allowed=True)


def review_quota(request: Mapping[str, Any], others: Iterable[TenantQuota]) -> dict[str, Any]:
    """The validating answer for a GpuQuota create or update."""
    uid = str(request["uid"])
    if request.get("operation") not in ("CREATE", "UPDATE"):
        return answer(uid, allowed=True)
    try:
        quota = read_quota(_object(request))
        check_with_others(quota, others)
    except GpupoolError as err:
        return answer(uid, allowed=False, message=str(err))
    return answer(uid, allowed=True)
