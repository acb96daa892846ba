"""The webhook's pure decisions: pod mutation, AdmissionReview answers, GpuQuota reading."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from gpupool.adapters.webhook.mutate import mutate_pod, tenant_of
from gpupool.adapters.webhook.review import (
    MalformedReview,
    parse_review,
    review_pod,
    review_quota,
)
from gpupool.adapters.wire.pods import read_pod_gpu
from gpupool.adapters.wire.quotas import read_quota
from gpupool.domain.errors import (
    InvalidQuantity,
    InvalidQuota,
    InvalidRequest,
    RequestExceedsCluster,
    UnknownGpuModel,
)
from gpupool.domain.quantity import format_quantity, parse_quantity
from gpupool.domain.units import GiB, MiB
from gpupool.quota.resource import Resource

STAMP = "2026-01-02T03:04:05.000006Z"


def pod(
    limits: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    resources: dict[str, Any] = {"limits": {"cpu": "1", **(limits or {})}}
    if requests is not None:
        resources["requests"] = requests
    return {
        "metadata": {"name": "p", "namespace": "ns", "annotations": annotations or {}},
        "spec": {"containers": [{"name": "main", "resources": resources}], **spec},
    }


def applied(patch: list[dict[str, Any]], obj: dict[str, Any]) -> dict[str, Any]:
    """Apply our `add` operations (the only kind mutate_pod emits)."""
    out = json.loads(json.dumps(obj))
    for op in patch:
        assert op["op"] == "add"
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target = out
        for part in parts[:-1]:
            target = target[int(part)] if isinstance(target, list) else target[part]
        target[parts[-1]] = op["value"]
    return out


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("12Gi", 12 * GiB),
        ("512Mi", 512 * MiB),
        ("1500m", 1.5),
        ("2e3", 2000),
        ("-3", -3),
        ("0", 0),
        (".5", 0.5),
        (7, 7),
    ],
)
def test_quantities_parse_exactly(text: str | int, value: float) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "12 Gi", "12GB", "abc", "1.2.3", True])
def test_bad_quantities_raise(text: object) -> None:
    with pytest.raises(InvalidQuantity):
        parse_quantity(text)


def test_format_quantity_round_trips() -> None:
    for amount in (0, 1, 12 * GiB, 1536 * MiB, 1000):
        assert parse_quantity(format_quantity(amount)) == amount


@pytest.mark.parametrize(
    ("limits", "annotations", "error", "message"),
    [
        (
            {"gpupool.io/gpu-memory": "-3"},
            {},
            InvalidQuantity,
            'gpupool.io/gpu-memory must be a positive quantity such as 12Gi; got "-3"',
        ),
        (
            {"gpupool.io/gpu-memory": "0"},
            {},
            InvalidQuantity,
            'must be a positive quantity such as 12Gi; got "0"',
        ),
        ({"gpupool.io/gpu-memory": "1500m"}, {}, InvalidQuantity, "whole number of bytes"),
        (
            {"gpupool.io/gpu-memory": "1Gi", "gpupool.io/gpu-compute": "0"},
            {},
            InvalidRequest,
            'gpupool.io/gpu-compute must be a whole number from 1 to 100 such as 30; got "0"',
        ),
        (
            {"gpupool.io/gpu-memory": "1Gi", "gpupool.io/gpu-compute": "101"},
            {},
            InvalidRequest,
            "from 1 to 100",
        ),
        ({"gpupool.io/gpu": "0"}, {}, InvalidRequest, "gpupool.io/gpu must be a whole number"),
        (
            {"gpupool.io/gpu-memory": "12Gi"},
            {"gpupool.io/gpu-model": "B999"},
            UnknownGpuModel,
            "annotation gpupool.io/gpu-model: unknown GPU model 'B999'",
        ),
        (
            {"gpupool.io/gpu-memory": "60Gi"},
            {"gpupool.io/gpu-model": "A100-40GB"},
            RequestExceedsCluster,
            "the largest of A100-40GB has 40Gi",
        ),
        ({"gpupool.io/gpu-memory": "500Gi"}, {}, RequestExceedsCluster, "largest GPU"),
        (
            {"gpupool.io/gpu-memory": "1Gi"},
            {"gpupool.io/exclusive": "yes"},
            InvalidRequest,
            'gpupool.io/exclusive must be "true" or "false"',
        ),
        (
            {"gpupool.io/gpu-memory": "1Gi"},
            {"gpupool.io/compute-mode": "mig"},
            InvalidRequest,
            'gpupool.io/compute-mode must be "mps" or "none" (or absent: the cluster',
        ),
        (
            {"gpupool.io/gpu-memory": "1Gi"},
            {"gpupool.io/workload": "batch"},
            InvalidRequest,
            "gpupool.io/workload must be one of inference, training",
        ),
        (
            {"gpupool.io/gpu-memory": "1Gi"},
            {"gpupool.io/placement-policy": "magic"},
            InvalidRequest,
            "gpupool.io/placement-policy must be one of",
        ),
        (
            {"gpupool.io/gpu-memory": "1Gi"},
            {"gpupool.io/gpu-model": "H800", "gpupool.io/avoid-gpu-model": "H800|T4"},
            InvalidRequest,
            "avoids every model",
        ),
        ({"gpupool.io/vgpu": "1"}, {}, InvalidRequest, "gpupool.io/vgpu is set by gpupool"),
    ],
)
def test_bad_pods_raise_one_typed_error_with_an_actionable_message(
    limits: dict[str, str], annotations: dict[str, str], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as caught:
        mutate_pod(pod(limits, annotations), {}, STAMP)
    assert message in str(caught.value)


def test_requests_must_equal_limits() -> None:
    bad = pod({"gpupool.io/gpu-memory": "12Gi"}, requests={"gpupool.io/gpu-memory": "8Gi"})
    with pytest.raises(InvalidRequest, match=r"requests of gpupool\.io/gpu-memory must equal"):
        read_pod_gpu(bad)


def test_two_gpu_containers_and_init_containers_are_rejected() -> None:
    two = pod({"gpupool.io/gpu-memory": "1Gi"})
    two["spec"]["containers"].append(
        {"name": "side", "resources": {"limits": {"gpupool.io/gpu-memory": "1Gi"}}}
    )
    with pytest.raises(InvalidRequest, match="only one container per pod"):
        read_pod_gpu(two)
    init = pod()
    init["spec"]["initContainers"] = [
        {"name": "init", "resources": {"limits": {"gpupool.io/gpu-memory": "1Gi"}}}
    ]
    with pytest.raises(InvalidRequest, match="only regular containers may use GPUs"):
        read_pod_gpu(init)


def test_system_annotations_and_node_name_are_rejected() -> None:
    with pytest.raises(InvalidRequest, match=r"gpupool\.io/allocation are written by gpupool"):
        mutate_pod(
            pod({"gpupool.io/gpu-memory": "1Gi"}, {"gpupool.io/allocation": "[]"}), {}, STAMP
        )
    with pytest.raises(InvalidRequest, match=r"remove spec\.nodeName"):
        mutate_pod(pod({"gpupool.io/gpu-memory": "1Gi"}, nodeName="n1"), {}, STAMP)


def test_good_pod_is_normalised_gated_and_stamped() -> None:
    original = pod(
        {"gpupool.io/gpu-memory": "12Gi", "gpupool.io/gpu-compute": "30"},
        {"gpupool.io/gpu-model": "a100-80gb|h800", "gpupool.io/exclusive": "TRUE"},
        schedulingGates=[{"name": "other"}],
    )
    mutation = mutate_pod(original, {"gpupool.io/tenant": "alpha"}, STAMP)
    out = applied(mutation.patch, original)
    assert mutation.tenant == "alpha"
    resources = out["spec"]["containers"][0]["resources"]
    for part in ("limits", "requests"):
        assert resources[part]["gpupool.io/vgpu"] == "1"
        assert resources[part]["gpupool.io/gpu"] == "1"
        assert resources[part]["gpupool.io/gpu-memory"] == "12Gi"
        assert resources[part]["gpupool.io/gpu-compute"] == "30"
    assert resources["limits"]["cpu"] == "1"
    assert out["spec"]["schedulingGates"] == [{"name": "other"}, {"name": "gpupool.io/quota"}]
    assert out["metadata"]["labels"]["gpupool.io/tenant"] == "alpha"
    annotations = out["metadata"]["annotations"]
    assert annotations["gpupool.io/gpu-model"] == "A100-80GB|H800"
    assert annotations["gpupool.io/exclusive"] == "true"
    assert annotations["gpupool.io/queued-at"] == STAMP
    # applying the mutation twice changes nothing more (reinvocation)
    again = mutate_pod(out, {"gpupool.io/tenant": "alpha"}, STAMP)
    assert applied(again.patch, out)["spec"]["schedulingGates"] == out["spec"]["schedulingGates"]


def test_the_compute_mode_none_and_the_workload_class_are_accepted_and_normalised() -> None:
    original = pod(
        {"gpupool.io/gpu-memory": "12Gi"},
        {"gpupool.io/compute-mode": " None", "gpupool.io/workload": "Training"},
    )
    mutation = mutate_pod(original, {}, STAMP)
    annotations = applied(mutation.patch, original)["metadata"]["annotations"]
    assert annotations["gpupool.io/compute-mode"] == "none"
    assert annotations["gpupool.io/workload"] == "training"
    assert mutation.gpu is not None and mutation.gpu.workload == "training"


def test_multi_gpu_pod_gets_one_vgpu_per_gpu() -> None:
    mutation = mutate_pod(pod({"gpupool.io/gpu": "4"}), {}, STAMP)
    out = applied(mutation.patch, pod({"gpupool.io/gpu": "4"}))
    assert out["spec"]["containers"][0]["resources"]["limits"]["gpupool.io/vgpu"] == "4"
    assert mutation.gpu is not None and mutation.gpu.request.whole_cards


def test_pod_without_gpu_passes_unchanged_with_a_warning_for_stray_annotations() -> None:
    mutation = mutate_pod(pod({}, {"gpupool.io/gpu-model": "H800"}), {}, STAMP)
    assert mutation.patch == [] and mutation.tenant is None
    assert "have no effect" in mutation.warnings[0]


def test_tenant_comes_from_the_namespace_label_else_default() -> None:
    assert tenant_of({"gpupool.io/tenant": "alpha"}) == "alpha"
    assert tenant_of({}) == "default"
    assert tenant_of({"gpupool.io/tenant": " "}) == "default"


def review(obj: dict[str, Any], operation: str = "CREATE", **extra: Any) -> bytes:
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": "u1", "operation": operation, "object": obj, **extra},
        }
    ).encode()


def test_review_answers_deny_with_the_message_and_allow_with_a_patch() -> None:
    bad = review_pod(parse_review(review(pod({"gpupool.io/gpu-memory": "-3"}))), {}, STAMP)
    response = bad["response"]
    assert response["uid"] == "u1" and response["allowed"] is False
    assert 'got "-3"' in response["status"]["message"] and response["status"]["code"] == 400
    good = review_pod(parse_review(review(pod({"gpupool.io/gpu-memory": "1Gi"}))), {}, STAMP)
    assert good["response"]["allowed"] is True and good["response"]["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(good["response"]["patch"]))
    assert {
        "op": "add",
        "path": "/spec/schedulingGates",
        "value": [{"name": "gpupool.io/quota"}],
    } in ops


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        b'{"kind": "Pod"}',
        b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1"}',
    ],
)
def test_malformed_reviews_raise(body: bytes) -> None:
    with pytest.raises(MalformedReview):
        parse_review(body)


def quota(name: str = "alpha", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": spec}


def test_quota_objects_read_into_tenant_quotas() -> None:
    q = read_quota(
        quota(
            nominal="80Gi",
            guaranteed="40Gi",
            cohort="c",
            borrowLimit="20Gi",
            computeLimit="1500m",
            maxPods=5,
            priority=3,
            reclaimGracePeriodSeconds=60,
            budget={"limitHours": 100, "windowSeconds": 86400},
        )
    )
    assert (q.nominal, q.guaranteed, q.borrow_limit) == (80 * GiB, 40 * GiB, 20 * GiB)
    assert q.compute_limit_milli == 1500 and q.max_pods == 5 and q.priority == 3
    assert q.reclaim_grace_s == 60 and q.budget is not None and q.budget.limit == 100
    gpus = read_quota(quota(nominal="2500m", resource="gpu"))
    assert gpus.resource is Resource.GPU and gpus.nominal == 2500


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"nominal": "40Gi", "guaranteed": "80Gi"}, "guaranteed quota (80Gi) is above the nominal"),
        ({"nominal": "-1"}, "spec.nominal must be 0 or more"),
        ({"nominal": "lots"}, "spec.nominal must be a quantity such as 80Gi"),
        ({"nominal": "80Gi", "resource": "gpu"}, "looks like a memory size"),
        ({"nominal": "1Gi", "borrowLimit": "1Gi"}, "no cohort to borrow from"),
        ({}, "spec.nominal is required"),
        (
            {"nominal": "1Gi", "budget": {"limitHours": 1, "windowSeconds": 0}},
            "spec.budget: a budget window must be a positive number of seconds; got 0",
        ),
        (
            {"nominal": "1Gi", "budget": {"limitHours": 1, "windowSeconds": -60}},
            "spec.budget: a budget window must be a positive number of seconds; got -60",
        ),
        (
            {"nominal": "1Gi", "budget": {"limitHours": "lots", "windowSeconds": 60}},
            "spec.budget needs limitHours (a number) and windowSeconds (an integer)",
        ),
        (
            {"nominal": "1Gi", "budget": {"limitHours": -1, "windowSeconds": 60}},
            "spec.budget: a budget must be 0 or more hours; got -1",
        ),
        (
            {
                "nominal": "1Gi",
                "budget": {"limitHours": 1, "windowSeconds": 60, "onExhaustion": "panic"},
            },
            "on-exhaustion must be 'block', 'preemptible' or 'drain'; got 'panic'",
        ),
        ({"nominal": "1Gi", "budget": "100h"}, "spec.budget must be an object"),
        ({"nominal": "1Gi", "lendAfterIdleSeconds": -5}, "spec.lendAfterIdleSeconds must be 0"),
        ({"nominal": "1Gi", "lendAfterIdleSeconds": "1h"}, "lendAfterIdleSeconds must be a whole"),
    ],
)
def test_bad_quotas_raise_invalid_quota(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidQuota) as caught:
        read_quota(quota(**spec))
    assert message in str(caught.value)


def test_quota_review_checks_the_cohort() -> None:
    other = read_quota(quota("beta", nominal="4", resource="gpu", cohort="c"))
    request = parse_review(review(quota(nominal="40Gi", cohort="c")))
    answer = review_quota(request, [other])
    assert answer["response"]["allowed"] is False
    assert "cohort 'c' mixes quota resources" in answer["response"]["status"]["message"]
    assert review_quota(request, [])["response"]["allowed"] is True


def test_a_quota_whose_budget_window_is_zero_is_denied_with_the_field_named() -> None:
    bad = quota(nominal="40Gi", budget={"limitHours": 1, "windowSeconds": 0})
    answer = review_quota(parse_review(review(bad)), [])
    assert answer["response"]["allowed"] is False
    message = answer["response"]["status"]["message"]
    assert "GpuQuota 'alpha': spec.budget: a budget window must be a positive number" in message


def test_idle_lending_reads_from_the_quota() -> None:
    q = read_quota(quota(nominal="80Gi", cohort="c", lendAfterIdleSeconds=1800))
    assert q.lend_after_idle_s == 1800
    assert read_quota(quota(nominal="80Gi")).lend_after_idle_s == 0
