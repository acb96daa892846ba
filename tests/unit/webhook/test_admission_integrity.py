"""Who may write gpupool's marks, which pods reach the webhook, and refusals in our own words:
the create-time checks of the mutating webhook, the pod-integrity policy and the registration
as objects (their CEL runs on a real API server in tests/e2e/test_integrity_admission_e2e.py),
and the pod shape checked at the edge."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpupool.adapters.webhook import policy
from gpupool.adapters.webhook import register as registration
from gpupool.adapters.webhook.mutate import UNKNOWN_CLUSTER, ClusterFacts, mutate_pod
from gpupool.adapters.webhook.review import parse_review, review_pod, review_quota
from gpupool.adapters.webhook.shape import MalformedObject, check_pod
from gpupool.adapters.wire import names
from gpupool.domain.errors import InvalidRequest, RequestExceedsCluster
from gpupool.domain.units import GiB

REPO = Path(__file__).resolve().parents[3]
STAMP = "2026-01-02T03:04:05.000006Z"
A100_80 = ("A100-80GB", 72 * GiB)
H100 = ("H100-80GB", 76 * GiB)


def gpu_pod(memory: str = "8Gi", annotations: dict[str, str] | None = None, **spec: Any) -> Any:
    return {
        "metadata": {"name": "p", "namespace": "ns", "annotations": annotations or {}},
        "spec": {
            "containers": [
                {"name": "main", "resources": {"limits": {names.RES_GPU_MEMORY: memory}}}
            ],
            **spec,
        },
    }


def plain_pod(annotations: dict[str, str] | None = None) -> Any:
    return {
        "metadata": {"name": "web", "annotations": annotations or {}},
        "spec": {"containers": [{"name": "nginx", "resources": {"limits": {"cpu": "1"}}}]},
    }


def review(obj: Any, operation: str = "CREATE") -> bytes:
    request = {"uid": "u1", "operation": operation, "namespace": "ns", "object": obj}
    return json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    ).encode()


def denial(obj: Any, cluster: ClusterFacts = UNKNOWN_CLUSTER) -> str:
    response = review_pod(parse_review(review(obj)), {}, STAMP, cluster)["response"]
    assert response["allowed"] is False, response
    message: str = response["status"]["message"]
    return message


# ---- create: the annotations only gpupool writes ---------------------------------------------

FORGEABLE = [k for k in names.SYSTEM_ANNOTATIONS if k != names.ANN_QUEUED_AT]


@pytest.mark.parametrize("key", FORGEABLE)
def test_a_gpu_pod_created_with_a_mark_only_gpupool_writes_is_refused(key: str) -> None:
    with pytest.raises(InvalidRequest, match=f"{key} are written by gpupool; remove them"):
        mutate_pod(gpu_pod(annotations={key: "x"}), {}, STAMP)


@pytest.mark.parametrize("key", names.SYSTEM_ANNOTATIONS)
def test_a_pod_without_gpus_created_with_a_mark_only_gpupool_writes_is_refused(key: str) -> None:
    # e.g. an allocation on a CPU pod would let it claim a card's bytes in the extender's view
    with pytest.raises(InvalidRequest, match=f"{key} are written by gpupool"):
        mutate_pod(plain_pod({key: "x"}), {}, STAMP)


def test_a_forged_queued_at_on_a_gpu_pod_is_overwritten_with_the_webhooks_clock() -> None:
    forged = "2000-01-01T00:00:00.000000Z"  # would put the pod at the head of its queue
    mutation = mutate_pod(gpu_pod(annotations={names.ANN_QUEUED_AT: forged}), {}, STAMP)
    [annotations] = [op["value"] for op in mutation.patch if op["path"] == "/metadata/annotations"]
    assert annotations[names.ANN_QUEUED_AT] == STAMP


def test_user_annotations_stay_allowed() -> None:
    mutation = mutate_pod(gpu_pod(annotations={names.ANN_GPU_MODEL: "A100-80GB"}), {}, STAMP)
    assert mutation.gpu is not None


# ---- create: the scheduler ---------------------------------------------------------------------


def test_a_gpu_pod_for_another_scheduler_is_refused_naming_the_one_to_use() -> None:
    message = denial(gpu_pod(schedulerName="volcano"))
    assert "spec.schedulerName is 'volcano'" in message
    assert "set spec.schedulerName to 'default-scheduler'" in message
    cluster = ClusterFacts(schedulers=("gpupool-scheduler",))
    assert "to 'gpupool-scheduler' (or remove it)" in denial(gpu_pod(), cluster)


def test_gpu_pods_for_a_scheduler_that_calls_the_extender_pass_and_plain_pods_never_ask() -> None:
    cluster = ClusterFacts(schedulers=("default-scheduler", "gpu"))
    for name in ("default-scheduler", "gpu"):
        assert mutate_pod(gpu_pod(schedulerName=name), {}, STAMP, cluster).gpu is not None
    other = plain_pod()
    other["spec"]["schedulerName"] = "volcano"
    assert mutate_pod(other, {}, STAMP, cluster).patch == []


# ---- create: the largest card ------------------------------------------------------------------


def test_a_request_over_the_clusters_largest_card_names_that_card() -> None:
    cluster = ClusterFacts(cards=(A100_80, A100_80, H100))
    with pytest.raises(RequestExceedsCluster) as caught:
        mutate_pod(gpu_pod("1000Gi"), {}, STAMP, cluster)
    message = str(caught.value)
    assert "asks for 1000Gi per GPU but the largest card in this cluster (H100-80GB) has 76Gi" in (
        message
    )
    assert "140" not in message  # not the catalogue's largest card
    # 100Gi fits a card gpupool knows (H200), but none this cluster has
    with pytest.raises(RequestExceedsCluster, match="largest card in this cluster"):
        mutate_pod(gpu_pod("100Gi"), {}, STAMP, cluster)
    assert mutate_pod(gpu_pod("76Gi"), {}, STAMP, cluster).gpu is not None


def test_with_a_model_asked_for_the_largest_card_of_that_model_bounds_the_request() -> None:
    cluster = ClusterFacts(cards=(A100_80, H100))
    pod = gpu_pod("74Gi", {names.ANN_GPU_MODEL: "A100-80GB"})
    with pytest.raises(RequestExceedsCluster, match=r"largest A100-80GB card .* has 72Gi"):
        mutate_pod(pod, {}, STAMP, cluster)


def test_without_known_cards_the_catalogue_bounds_the_request() -> None:
    with pytest.raises(RequestExceedsCluster, match="the largest GPU gpupool knows"):
        mutate_pod(gpu_pod("1000Gi"), {}, STAMP)
    # cards of other models only: the catalogue's size of the asked model
    pod = gpu_pod("50Gi", {names.ANN_GPU_MODEL: "A100-40GB"})
    with pytest.raises(RequestExceedsCluster, match="the largest of A100-40GB has 40Gi"):
        mutate_pod(pod, {}, STAMP, ClusterFacts(cards=(H100,)))


# ---- shapes: our own sentences, never Python's -----------------------------------------------


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"spec": {"containers": "nope"}}, "spec.containers must be a list; got a string"),
        ({"spec": {"containers": ["nope"]}}, "spec.containers[0] must be an object; got a string"),
        ({"spec": []}, "spec must be an object; got a list"),
        ({"metadata": "x"}, "metadata must be an object; got a string"),
        ({"metadata": {"annotations": {"a": 1}}}, "metadata.annotations['a'] must be a string"),
        ({"metadata": {"labels": []}}, "metadata.labels must be an object; got a list"),
        (
            {"spec": {"containers": [{"resources": {"limits": {names.RES_GPU: [1]}}}]}},
            "spec.containers[0].resources.limits['gpupool.io/gpu'] must be a quantity",
        ),
        (
            {"spec": {"containers": [{"resources": {"limits": {names.RES_GPU: True}}}]}},
            "must be a quantity (a string such as 12Gi, or a number); got a boolean",
        ),
        ({"spec": {"containers": [{"name": 3}]}}, "spec.containers[0].name must be a string"),
        ({"spec": {"schedulingGates": [None]}}, "spec.schedulingGates[0] must be an object"),
        ({"spec": {"priority": "high"}}, "spec.priority must be a whole number; got a string"),
        ({"spec": {"nodeName": 7}}, "spec.nodeName must be a string; got a number"),
    ],
)
def test_a_malformed_pod_is_refused_naming_the_field_and_its_type(obj: Any, message: str) -> None:
    with pytest.raises(MalformedObject) as caught:
        check_pod(obj)
    assert message in str(caught.value)
    assert message in denial(obj)


def test_a_malformed_quota_is_refused_in_our_words() -> None:
    request = parse_review(review({"metadata": {"name": "a"}, "spec": "lots"}))
    response = review_quota(request, [])["response"]
    assert response["allowed"] is False
    assert response["status"]["message"] == "spec must be an object; got a string"


# ---- the registration: only pods that concern gpupool are sent ------------------------------


def _registration() -> list[dict[str, Any]]:
    target = registration.Target(url="https://127.0.0.1:9443")
    return registration.configurations(registration.Registration(target, b"ca"))


def test_the_pod_webhook_is_called_only_for_pods_that_concern_gpupool() -> None:
    mutating, validating = _registration()
    [hook] = mutating["webhooks"]
    assert (
        hook["name"] == registration.POD_WEBHOOK == "gpu-pods-need-the-gpupool-webhook.gpupool.io"
    )
    assert hook["failurePolicy"] == "Fail"  # a GPU pod never skips its quota
    assert hook["matchConditions"] == [registration.POD_CONDITION]
    expression = registration.POD_CONDITION["expression"]
    for part in (
        "object.spec.containers",
        "object.spec.initContainers",
        "startsWith('gpupool.io/')",
        "object.metadata.annotations",
        f"g.name == '{names.QUOTA_GATE}'",
    ):
        assert part in expression
    # pod updates go to no webhook at all: the pod-integrity policy checks them
    assert [w["name"] for w in validating["webhooks"]] == [registration.QUOTA_WEBHOOK]
    assert all("pods" not in w["rules"][0]["resources"] for w in validating["webhooks"])


# ---- the pod-integrity policy --------------------------------------------------------------------


def test_the_policy_file_is_what_the_code_builds_and_the_kustomization_applies_it() -> None:
    path = REPO / "deploy" / "policies" / "pod-integrity.yaml"
    assert [d for d in yaml.safe_load_all(path.read_text()) if d] == policy.objects()
    resources = yaml.safe_load((REPO / "deploy" / "kustomization.yaml").read_text())["resources"]
    assert "policies/pod-integrity.yaml" in resources


def test_the_policy_guards_every_mark_gpupool_writes_and_lets_only_its_writers_through() -> None:
    vap, bound = policy.objects()
    spec = vap["spec"]
    written = next(v["expression"] for v in spec["variables"] if v["name"] == "written")
    for key in names.SYSTEM_ANNOTATIONS:
        assert f"'{key}'" in written
    create_keys, update_keys = written.split(" : ")[0], written.split(" : ")[1]
    assert f"'{names.ANN_QUEUED_AT}'" not in create_keys  # the webhook stamps it on create
    assert f"'{names.ANN_QUEUED_AT}'" in update_keys
    validations = " ".join(v["expression"] for v in spec["validations"])
    assert names.QUOTA_GATE in validations and names.LABEL_TENANT in validations
    assert spec["failurePolicy"] == "Fail"
    assert bound["spec"] == {"policyName": policy.NAME, "validationActions": ["Deny"]}
    trusted = spec["matchConditions"][0]["expression"]
    for user in policy.writer_users():
        assert f"'{user}'" in trusted
    assert "gpupool-webhook" not in trusted and "gpupool-agent" not in trusted


def test_the_policys_writers_are_the_service_accounts_of_deploy_rbac() -> None:
    accounts = {
        (d["metadata"]["namespace"], d["metadata"]["name"])
        for path in (REPO / "deploy" / "rbac").glob("*.yaml")
        for d in yaml.safe_load_all(path.read_text())
        if d and d["kind"] == "ServiceAccount"
    }
    for account in policy.WRITERS:
        assert (policy.NAMESPACE, account) in accounts
