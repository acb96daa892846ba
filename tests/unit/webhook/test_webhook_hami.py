"""HAMi's pod names at admission: every name of the table translated, every bad value refused,
a pod mixing both kinds refused, a warning per translation; compute-mode timeslice refused."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpupool.adapters.webhook import hami
from gpupool.adapters.webhook.cards import Card
from gpupool.adapters.webhook.mutate import TIMESLICE_REFUSED, ClusterFacts, mutate_pod
from gpupool.adapters.webhook.register import POD_CONDITION, pod_condition
from gpupool.adapters.webhook.review import parse_review, review_pod
from gpupool.domain.errors import (
    InvalidQuantity,
    InvalidRequest,
    RequestExceedsCluster,
    UnknownGpuModel,
)
from gpupool.domain.models import CATALOGUE
from gpupool.domain.units import GiB, MiB

STAMP = "2026-01-02T03:04:05.000006Z"
# What a GpuNode reports of an A100-80GB: 81,920 MiB, of which 72 GiB allocatable (10% reserve).
A100_80 = ClusterFacts(cards=(Card("A100-80GB", 72 * GiB, 80 * GiB),) * 4)
# (model, allocatable) pairs, as older callers give: the whole memory is the catalogue's.
MIXED = ClusterFacts(cards=(("A100-80GB", 72 * GiB), ("T4", 14 * GiB)))


def pod(
    limits: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
    requests: dict[str, Any] | None = None,
) -> dict[str, Any]:
    resources: dict[str, Any] = {"limits": {"cpu": "1", **(limits or {})}}
    if requests is not None:
        resources["requests"] = requests
    return {
        "metadata": {"name": "p", "namespace": "ns", "annotations": annotations or {}},
        "spec": {"containers": [{"name": "main", "resources": resources}]},
    }


def applied(patch: list[dict[str, Any]], obj: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(obj))
    for op in patch:
        assert op["op"] == "add"
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target = out
        for part in parts[:-1]:
            target = target[int(part)] if isinstance(target, list) else target[part]
        target[parts[-1]] = op["value"]
    return out


def admitted(
    limits: dict[str, Any],
    annotations: dict[str, str] | None = None,
    cluster: ClusterFacts = A100_80,
) -> tuple[dict[str, Any], dict[str, Any], tuple[str, ...]]:
    """(the GPU container's limits, the pod's annotations, the warnings) after admission."""
    original = pod(limits, annotations)
    mutation = mutate_pod(original, {}, STAMP, cluster)
    out = applied(mutation.patch, original)
    resources = out["spec"]["containers"][0]["resources"]
    assert resources["limits"] == resources["requests"] | {"cpu": "1"}
    return resources["limits"], out["metadata"]["annotations"], mutation.warnings


def gpupool_part(limits: dict[str, Any]) -> dict[str, Any]:
    assert not [k for k in limits if k.startswith("nvidia.com/")], limits
    return {k: v for k, v in limits.items() if k.startswith("gpupool.io/")}


# ---- the table, name by name ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        # gpumem: MiB per card; the API server hands 3000 over as "3k"
        ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}, {"gpu-memory": "3000Mi"}),
        ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3k"}, {"gpu-memory": "3000Mi"}),
        ({"nvidia.com/gpumem": 10240}, {"gpu-memory": "10Gi"}),  # count defaults to 1
        # gpumem-percentage: of the card's whole memory (80Gi here), as HAMi reads it
        ({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}, {"gpu-memory": "40Gi"}),
        ({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "25"}, {"gpu-memory": "20Gi"}),
        # ... capped at what the node offers for slices (72Gi of the 80Gi)
        ({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "95"}, {"gpu-memory": "72Gi"}),
        ({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100"}, {}),  # the whole card
        # gpucores: % of the SMs; 0 is HAMi's "no cap"
        (
            {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4096", "nvidia.com/gpucores": "30"},
            {"gpu-memory": "4Gi", "gpu-compute": "30"},
        ),
        ({"nvidia.com/gpumem": "4096", "nvidia.com/gpucores": "0"}, {"gpu-memory": "4Gi"}),
        ({"nvidia.com/gpucores": "100"}, {"gpu-compute": "100"}),  # whole card, SMs capped 100%
        # several cards: a slice on each
        (
            {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "8000"},
            {"gpu": "2", "gpu-memory": "8000Mi"},
        ),
        (
            {"nvidia.com/gpu": "4", "nvidia.com/gpumem-percentage": "50"},
            {"gpu": "4", "gpu-memory": "40Gi"},
        ),
        (
            {
                "nvidia.com/gpu": "2",
                "nvidia.com/gpumem-percentage": "30",
                "nvidia.com/gpucores": 30,
            },
            {"gpu": "2", "gpu-memory": "24Gi", "gpu-compute": "30"},
        ),
        # 100%: whole cards, no gpu-memory
        (
            {"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "100"},
            {"gpu": "2"},
        ),
        # nvidia.com/gpu alone: whole cards (HAMi's and NVIDIA's meaning)
        ({"nvidia.com/gpu": "2"}, {"gpu": "2"}),
    ],
)
def test_hami_resources_become_gpupools(limits: dict[str, Any], expected: dict[str, str]) -> None:
    out, _, warnings = admitted(limits)
    count = expected.get("gpu", "1")
    want = {f"gpupool.io/{k}": v for k, v in {"gpu": count, "vgpu": count, **expected}.items()}
    assert gpupool_part(out) == want
    assert out["cpu"] == "1"  # the rest of the container is kept
    assert warnings and all("HAMi's" in w or "NVIDIA's" in w for w in warnings)


def test_each_translated_name_gets_its_own_warning() -> None:
    _, _, warnings = admitted(
        {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3k", "nvidia.com/gpucores": "30"},
        {"nvidia.com/use-gputype": "A100-80GB"},
    )
    assert warnings == (
        "container 'main': HAMi's nvidia.com/gpu: 1 → gpupool.io/gpu: 1",
        "container 'main': HAMi's nvidia.com/gpumem: 3000 → gpupool.io/gpu-memory: 3000Mi",
        "container 'main': HAMi's nvidia.com/gpucores: 30 → gpupool.io/gpu-compute: 30",
        "HAMi's annotation nvidia.com/use-gputype: A100-80GB → gpupool.io/gpu-model: A100-80GB",
    )


def test_slices_whole_cards_and_no_cap_are_said_in_the_warnings() -> None:
    _, _, warnings = admitted({"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "30"})
    assert warnings == (
        "container 'main': HAMi's nvidia.com/gpu: 2 → gpupool.io/gpu: 2",
        "container 'main': HAMi's nvidia.com/gpumem-percentage: 30 → gpupool.io/gpu-memory: 24Gi "
        "on each of 2 cards (30% of the card's 80Gi)",
    )
    assert not [w for w in warnings if "whole cards" in w]
    _, _, warnings = admitted({"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "100"})
    assert warnings == (
        "container 'main': HAMi's nvidia.com/gpu: 2 → gpupool.io/gpu: 2 (whole cards)",
        "container 'main': HAMi's nvidia.com/gpumem-percentage: 100 → whole cards",
    )
    _, _, warnings = admitted({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "95"})
    assert warnings[-1].endswith("(95% of the card's 80Gi, capped at the 72Gi it offers)")
    _, _, warnings = admitted({"nvidia.com/gpumem": "100", "nvidia.com/gpucores": "0"})
    assert any("nvidia.com/gpucores: 0 → no compute cap" in w for w in warnings)
    _, _, warnings = admitted({"nvidia.com/gpumem": "100"})
    assert warnings[0] == (
        "container 'main': HAMi's default of 1 nvidia.com/gpu → gpupool.io/gpu: 1"
    )


@pytest.mark.parametrize(
    ("percent", "mib"),
    [("40", 32768), ("60", 49152), ("10", 8192), ("1", 819)],
)
def test_a_percentage_is_of_the_cards_whole_memory_as_hami_reads_it(percent: str, mib: int) -> None:
    """HAMi's use_sharing_card.yaml: 40% and 60% of an 81,920 MiB card."""
    original = pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": percent})
    mutation = mutate_pod(original, {}, STAMP, A100_80)
    assert mutation.gpu is not None
    assert mutation.gpu.request.gpu_memory_bytes == mib * MiB


@pytest.mark.parametrize(
    ("annotation", "value", "models"),
    [
        ("nvidia.com/use-gputype", "A100", "A100-40GB|A100-80GB"),  # HAMi: a part of the type
        ("nvidia.com/use-gputype", "V100", "V100-16GB|V100-32GB"),
        ("nvidia.com/use-gputype", "A10", "A10"),  # a gpupool model's exact name: only it
        ("nvidia.com/use-gputype", "NVIDIA A100-SXM4-40GB", "A100-40GB"),  # NVML's type name
        ("nvidia.com/use-gputype", "h100,t4", "H100|T4"),
        ("nvidia.com/use-gputype", "Tesla-T4", "T4"),
        (
            "nvidia.com/nouse-gputype",
            "T4,V100",
            "|".join(
                m.name
                for m in CATALOGUE
                if m.known and m.name not in ("T4", "V100-16GB", "V100-32GB")
            ),
        ),
    ],
)
def test_gpu_type_annotations_become_the_gpu_model_list(
    annotation: str, value: str, models: str
) -> None:
    _, annotations, warnings = admitted({"nvidia.com/gpumem": "1000"}, {annotation: value}, MIXED)
    assert annotations["gpupool.io/gpu-model"] == models
    assert annotation not in annotations
    assert f"HAMi's annotation {annotation}: {value} → gpupool.io/gpu-model: {models}" in warnings


def test_use_and_nouse_together_leave_the_difference() -> None:
    _, annotations, _ = admitted(
        {"nvidia.com/gpumem": "1000"},
        {"nvidia.com/use-gputype": "A100", "nvidia.com/nouse-gputype": "A100-40GB"},
    )
    assert annotations["gpupool.io/gpu-model"] == "A100-80GB"


def test_a_percentage_is_sized_by_the_cards_of_the_named_type_on_a_mixed_cluster() -> None:
    limits, _, warnings = admitted(
        {"nvidia.com/gpumem-percentage": "50"}, {"nvidia.com/use-gputype": "T4"}, MIXED
    )
    assert limits["gpupool.io/gpu-memory"] == "7680Mi"  # half of the T4's 15,360 MiB
    assert any("(50% of the card's 15Gi)" in w for w in warnings)


def test_a_percentage_before_any_gpunode_uses_the_catalogue_of_the_named_type() -> None:
    limits, _, _ = admitted(
        {"nvidia.com/gpumem-percentage": "50"},
        {"nvidia.com/use-gputype": "A100-80GB"},
        ClusterFacts(),
    )
    assert limits["gpupool.io/gpu-memory"] == "40Gi"  # half of the catalogue's 81920 MiB


def test_the_translated_pod_is_what_gpupool_reads_and_reinvocation_changes_nothing() -> None:
    original = pod(
        {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "25"},
        {"nvidia.com/use-gputype": "A100-80GB", "team": "x"},
    )
    first = mutate_pod(original, {}, STAMP, A100_80)
    assert first.gpu is not None
    request = first.gpu.request
    assert (request.gpu_count, request.gpu_memory_bytes, request.compute_pct) == (
        1,
        3000 * MiB,
        25,
    )
    assert request.models == ("A100-80GB",)
    out = applied(first.patch, original)
    assert out["metadata"]["annotations"]["team"] == "x"
    assert {g["name"] for g in out["spec"]["schedulingGates"]} == {"gpupool.io/quota"}
    again = mutate_pod(out, {}, STAMP, A100_80)  # the API server may call the webhook twice
    assert again.warnings == ()
    assert applied(again.patch, out) == applied(first.patch, original)


def test_review_answer_carries_the_warnings() -> None:
    body = json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u1",
                "operation": "CREATE",
                "object": pod({"nvidia.com/gpumem": "2048"}),
            },
        }
    ).encode()
    response = review_pod(parse_review(body), {}, STAMP, A100_80)["response"]
    assert response["allowed"] is True
    assert response["warnings"] == [
        "container 'main': HAMi's default of 1 nvidia.com/gpu → gpupool.io/gpu: 1",
        "container 'main': HAMi's nvidia.com/gpumem: 2048 → gpupool.io/gpu-memory: 2Gi",
    ]


# ---- what is not a HAMi pod -------------------------------------------------------------------


def test_nvidia_gpu_alone_becomes_a_gpupool_pod_of_whole_cards() -> None:
    plain = pod({"nvidia.com/gpu": "1"})
    assert not hami.is_hami_pod(plain) and hami.is_hami_pod(plain, adopt_nvidia_gpu=True)
    mutation = mutate_pod(plain, {}, STAMP, A100_80)
    assert mutation.gpu is not None
    request = mutation.gpu.request
    assert (request.gpu_count, request.gpu_memory_bytes) == (1, None)  # a whole card
    out = applied(mutation.patch, plain)
    assert gpupool_part(out["spec"]["containers"][0]["resources"]["limits"]) == {
        "gpupool.io/gpu": "1",
        "gpupool.io/vgpu": "1",
    }
    assert {g["name"] for g in out["spec"]["schedulingGates"]} == {"gpupool.io/quota"}
    assert out["metadata"]["labels"]["gpupool.io/tenant"] == "default"
    assert mutation.warnings[0] == (
        "container 'main': NVIDIA's nvidia.com/gpu: 1 → gpupool.io/gpu: 1 (a whole card)"
    )
    assert "gpupool serves pods that ask for nvidia.com/gpu" in mutation.warnings[1]
    assert 'gpupool.io/adopt-nvidia-gpu: "false"' in mutation.warnings[1]


@pytest.mark.parametrize(
    ("annotations", "namespace_labels", "cluster"),
    [
        ({"gpupool.io/adopt-nvidia-gpu": "false"}, {}, A100_80),
        ({}, {"gpupool.io/adopt-nvidia-gpu": "false"}, A100_80),
        ({}, {}, ClusterFacts(cards=A100_80.cards, adopt_nvidia_gpu=False)),
    ],
    ids=["pod-annotation", "namespace-label", "webhook-flag"],
)
def test_nvidia_gpu_alone_can_be_left_to_nvidias_device_plugin(
    annotations: dict[str, str], namespace_labels: dict[str, str], cluster: ClusterFacts
) -> None:
    plain = pod({"nvidia.com/gpu": "1"}, annotations)
    mutation = mutate_pod(plain, namespace_labels, STAMP, cluster)
    assert mutation.patch == [] and mutation.gpu is None and mutation.warnings == ()
    # a HAMi pod is still translated: the opt-out is for NVIDIA's resource alone
    hami_pod = pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}, annotations)
    assert mutate_pod(hami_pod, namespace_labels, STAMP, cluster).gpu is not None


def test_a_bad_opt_out_value_is_refused_with_what_it_may_be() -> None:
    with pytest.raises(InvalidRequest, match='adopt-nvidia-gpu must be "true" or "false"'):
        mutate_pod(pod({"nvidia.com/gpu": "1"}, {"gpupool.io/adopt-nvidia-gpu": "no"}), {}, STAMP)


def test_hami_annotations_on_a_pod_without_gpus_only_warn() -> None:
    mutation = mutate_pod(pod({}, {"nvidia.com/use-gputype": "A100"}), {}, STAMP, A100_80)
    assert mutation.patch == []
    assert mutation.warnings == (
        "annotations nvidia.com/use-gputype have no effect: the pod asks for no GPU",
    )


def test_the_match_condition_routes_hami_names_and_nvidia_gpu_unless_told_not_to() -> None:
    expression = POD_CONDITION["expression"]
    assert pod_condition(True) == POD_CONDITION
    for name in (*hami.HAMI_RESOURCES, *hami.HAMI_ANNOTATIONS, "nvidia.com/gpu"):
        assert f"'{name}'" in expression
    assert "r.startsWith('nvidia.com/mig-')" in expression
    left = pod_condition(False)["expression"]
    for name in (*hami.HAMI_RESOURCES, *hami.HAMI_ANNOTATIONS):
        assert f"'{name}'" in left
    assert "'nvidia.com/gpu'" not in left and "nvidia.com/mig-" not in left


# ---- mixing -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "annotations", "ours", "theirs"),
    [
        (
            {"nvidia.com/gpumem": "3000", "gpupool.io/gpu-memory": "3Gi"},
            {},
            "gpupool.io/gpu-memory",
            "nvidia.com/gpumem",
        ),
        (
            {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "20"},
            {"gpupool.io/gpu-model": "A100-80GB"},
            "gpupool.io/gpu-model",
            "nvidia.com/gpu, nvidia.com/gpucores",
        ),
        (
            {"gpupool.io/gpu-memory": "3Gi"},
            {"nvidia.com/use-gputype": "A100"},
            "gpupool.io/gpu-memory",
            "nvidia.com/use-gputype",
        ),
        # NVIDIA's own resource beside gpupool's: two device plugins for one container
        ({"gpupool.io/gpu": "1", "nvidia.com/gpu": "1"}, {}, "gpupool.io/gpu", "nvidia.com/gpu"),
    ],
)
def test_a_pod_mixing_both_kinds_is_refused(
    limits: dict[str, Any], annotations: dict[str, str], ours: str, theirs: str
) -> None:
    with pytest.raises(hami.MixedResourceNames) as caught:
        mutate_pod(pod(limits, annotations), {}, STAMP, A100_80)
    message = str(caught.value)
    assert f"the pod mixes HAMi's names ({theirs}) with gpupool's ({ours})" in message
    assert "write its GPU request in one kind only" in message


def test_mixing_across_containers_is_refused_too() -> None:
    mixed = pod({"nvidia.com/gpumem": "3000"})
    mixed["spec"]["containers"].append(
        {"name": "side", "resources": {"limits": {"gpupool.io/gpu-memory": "1Gi"}}}
    )
    with pytest.raises(hami.MixedResourceNames):
        mutate_pod(mixed, {}, STAMP, A100_80)


# ---- bad values -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "annotations", "error", "message"),
    [
        ({"nvidia.com/gpumem": "0"}, {}, InvalidQuantity, "must be a whole number of MiB"),
        ({"nvidia.com/gpumem": "-512"}, {}, InvalidQuantity, "must be a whole number of MiB"),
        ({"nvidia.com/gpumem": "1500m"}, {}, InvalidQuantity, "must be a whole number of MiB"),
        ({"nvidia.com/gpumem": "lots"}, {}, InvalidQuantity, 'such as 3000; got "lots"'),
        ({"nvidia.com/gpumem": "3Gi"}, {}, InvalidQuantity, "counts MiB as a plain number"),
        (
            {"nvidia.com/gpumem-percentage": "101"},
            {},
            InvalidRequest,
            'gpumem-percentage must be a whole number from 1 to 100 such as 50; got "101"',
        ),
        ({"nvidia.com/gpumem-percentage": "250"}, {}, InvalidRequest, "from 1 to 100"),
        ({"nvidia.com/gpumem-percentage": "0"}, {}, InvalidRequest, "from 1 to 100"),
        ({"nvidia.com/gpumem-percentage": "12.5"}, {}, InvalidRequest, "from 1 to 100"),
        ({"nvidia.com/gpucores": "101"}, {}, InvalidRequest, "nvidia.com/gpucores must be a whole"),
        ({"nvidia.com/gpucores": "-5"}, {}, InvalidRequest, "from 0 to 100"),
        ({"nvidia.com/gpucores": "half"}, {}, InvalidRequest, 'got "half"'),
        (
            {"nvidia.com/gpu": "0", "nvidia.com/gpumem": "100"},
            {},
            InvalidRequest,
            "nvidia.com/gpu must be a whole number from 1 to 64",
        ),
        ({"nvidia.com/gpu": "65", "nvidia.com/gpumem": "100"}, {}, InvalidRequest, "1 to 64"),
        (
            {"nvidia.com/gpumem": "1000", "nvidia.com/gpumem-percentage": "10"},
            {},
            InvalidRequest,
            "give either nvidia.com/gpumem (MiB) or nvidia.com/gpumem-percentage, not both",
        ),
        (
            {"nvidia.com/gpumem": "100"},
            {"nvidia.com/use-gputype": "Z9000"},
            UnknownGpuModel,
            "annotation nvidia.com/use-gputype: no GPU model gpupool knows matches 'Z9000'",
        ),
        (
            {"nvidia.com/gpumem": "100"},
            {"nvidia.com/use-gputype": " , "},
            InvalidRequest,
            "lists no GPU type",
        ),
        (
            {"nvidia.com/gpumem": "100"},
            {"nvidia.com/use-gputype": "T4", "nvidia.com/nouse-gputype": "T4"},
            InvalidRequest,
            "excludes every GPU type nvidia.com/use-gputype allows",
        ),
        (
            {"nvidia.com/gpumem": "100"},
            {"nvidia.com/use-gpuuuid": "GPU-1234"},
            InvalidRequest,
            "nvidia.com/use-gpuuuid has no gpupool equivalent",
        ),
        (
            {"nvidia.com/gpumem": "100"},
            {"nvidia.com/nouse-gpuuuid": "GPU-1234"},
            InvalidRequest,
            "nvidia.com/nouse-gpuuuid has no gpupool equivalent",
        ),
        (
            {"nvidia.com/gpumem": "100", "nvidia.com/priority": "1"},
            {},
            InvalidRequest,
            "nvidia.com/priority has no gpupool equivalent",
        ),
        (
            {"nvidia.com/gpumem": "900000"},
            {},
            RequestExceedsCluster,
            "HAMi's nvidia.com/gpumem: 900000 → gpupool.io/gpu-memory: 900000Mi)",
        ),
    ],
)
def test_bad_hami_values_are_refused_with_a_message_naming_the_hami_field(
    limits: dict[str, Any], annotations: dict[str, str], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as caught:
        mutate_pod(pod(limits, annotations), {}, STAMP, A100_80)
    assert message in str(caught.value)


def test_a_percentage_on_cards_of_several_sizes_is_refused() -> None:
    with pytest.raises(InvalidRequest) as caught:
        mutate_pod(pod({"nvidia.com/gpumem-percentage": "50"}), {}, STAMP, MIXED)
    message = str(caught.value)
    assert "differ in size (15Gi, 80Gi on the cluster's GpuNodes; 50% is 7.5Gi, 40Gi)" in message
    assert "ask for nvidia.com/gpumem (MiB per card) instead" in message


def test_a_percentage_with_no_card_to_size_it_by_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="no GpuNode reports a card yet"):
        mutate_pod(pod({"nvidia.com/gpumem-percentage": "50"}), {}, STAMP, ClusterFacts())


def test_requests_must_equal_limits_for_hami_names() -> None:
    bad = pod({"nvidia.com/gpumem": "3000"}, requests={"nvidia.com/gpumem": "2000"})
    with pytest.raises(InvalidRequest, match=r"requests of nvidia\.com/gpumem must equal"):
        mutate_pod(bad, {}, STAMP, A100_80)


def test_hami_names_in_an_init_container_are_refused() -> None:
    init = pod({})
    init["spec"]["initContainers"] = [
        {"name": "prep", "resources": {"limits": {"nvidia.com/gpumem": "1000"}}}
    ]
    with pytest.raises(InvalidRequest, match=r"initContainer 'prep' asks for nvidia\.com/gpumem"):
        mutate_pod(init, {}, STAMP, A100_80)


# ---- compute modes ----------------------------------------------------------------------------


def test_timeslice_is_refused_with_what_to_do_instead() -> None:
    with pytest.raises(InvalidRequest) as caught:
        mutate_pod(
            pod({"gpupool.io/gpu-memory": "1Gi"}, {"gpupool.io/compute-mode": "TimeSlice"}),
            {},
            STAMP,
        )
    assert str(caught.value) == TIMESLICE_REFUSED
    assert "remove the annotation, or set it to mps" in TIMESLICE_REFUSED


def test_mps_is_still_accepted() -> None:
    mutation = mutate_pod(
        pod({"gpupool.io/gpu-memory": "1Gi"}, {"gpupool.io/compute-mode": "mps"}), {}, STAMP
    )
    assert mutation.gpu is not None and mutation.gpu.compute_mode == "mps"


def test_hamis_scheduler_name_becomes_one_that_calls_gpupools_extender() -> None:
    original = pod({"nvidia.com/gpumem": "1000"})
    original["spec"]["schedulerName"] = "hami-scheduler"
    cluster = ClusterFacts(cards=A100_80.cards, schedulers=("gpu-scheduler",))
    mutation = mutate_pod(original, {}, STAMP, cluster)
    assert applied(mutation.patch, original)["spec"]["schedulerName"] == "gpu-scheduler"
    assert "HAMi's spec.schedulerName: hami-scheduler → gpu-scheduler" in mutation.warnings
    other = pod({"nvidia.com/gpumem": "1000"})
    other["spec"]["schedulerName"] = "volcano"  # not HAMi's: refused as for any GPU pod
    with pytest.raises(InvalidRequest, match=r"spec\.schedulerName is 'volcano'"):
        mutate_pod(other, {}, STAMP, cluster)


# ---- HAMi's scheduling and mode annotations ---------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "stamped", "warning"),
    [
        (
            {"hami.io/node-scheduler-policy": "binpack"},
            {"gpupool.io/placement-policy": "binpack"},
            "HAMi's annotation hami.io/node-scheduler-policy: binpack → "
            "gpupool.io/placement-policy: binpack (gpupool's binpack: the fullest node that fits)",
        ),
        (
            {"hami.io/node-scheduler-policy": "Spread"},
            {"gpupool.io/placement-policy": "spread"},
            "→ gpupool.io/placement-policy: spread (gpupool's spread: the emptiest node that fits)",
        ),
        (
            {"hami.io/node-scheduler-policy": "fifo"},
            {},
            "hami.io/node-scheduler-policy: fifo is ignored: HAMi's node policies are binpack",
        ),
        (
            {"hami.io/gpu-scheduler-policy": "spread"},
            {},
            "hami.io/gpu-scheduler-policy: spread ignored: gpupool has no policy that spreads",
        ),
        (
            {"hami.io/gpu-scheduler-policy": "topology-aware"},
            {},
            "topology-aware ignored: gpupool already takes a multi-GPU pod's cards from one NVLink",
        ),
        ({"hami.io/gpu-scheduler-policy": "mutex"}, {}, "mutex ignored: gpupool has no idle-cards"),
        (
            {"hami.io/gpu-scheduler-policy": "binpack,numa"},
            {},
            "numa ignored: gpupool already prefers cards on one NUMA node",
        ),
        (
            {"hami.io/device-scoring-weights": '{"core": 2}'},
            {},
            "hami.io/device-scoring-weights is ignored: gpupool's placement policies take no",
        ),
        (
            {"nvidia.com/vgpu-mode": "mps"},
            {"gpupool.io/compute-mode": "mps"},
            "HAMi's annotation nvidia.com/vgpu-mode: mps → gpupool.io/compute-mode: mps",
        ),
        ({"nvidia.com/vgpu-mode": "hami-core"}, {}, "hami-core ignored: gpupool's limiter caps"),
        ({"nvidia.com/vgpu-mode": "mig"}, {}, "mig ignored: gpupool does not make MIG instances"),
        (
            {"nvidia.com/numa-bind": "true"},
            {},
            "nvidia.com/numa-bind: true is ignored: gpupool prefers cards on one NUMA node",
        ),
    ],
)
def test_hamis_policy_annotations_are_mapped_or_ignored_with_a_warning_never_refused(
    annotations: dict[str, str], stamped: dict[str, str], warning: str
) -> None:
    original = pod({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "1000"}, annotations)
    first = mutate_pod(original, {}, STAMP, A100_80)
    out = applied(first.patch, original)
    kept = out["metadata"]["annotations"]
    assert not [k for k in kept if k.startswith(("hami.io/", "nvidia.com/"))], kept
    for key, value in stamped.items():
        assert kept[key] == value
    assert "gpupool.io/placement-policy" in kept or "gpupool.io/placement-policy" not in stamped
    assert any(warning in w for w in first.warnings), first.warnings
    assert first.gpu is not None
    if "gpupool.io/placement-policy" in stamped:
        assert first.gpu.placement_policy == stamped["gpupool.io/placement-policy"]
    again = mutate_pod(out, {}, STAMP, A100_80)  # reinvocation: nothing left to translate
    assert again.warnings == ()


def test_policy_annotations_alone_with_nvidia_gpu_are_left_to_nvidia_when_not_adopting() -> None:
    plain = pod({"nvidia.com/gpu": "1"}, {"hami.io/node-scheduler-policy": "spread"})
    cluster = ClusterFacts(cards=A100_80.cards, adopt_nvidia_gpu=False)
    assert mutate_pod(plain, {}, STAMP, cluster).patch == []
    # adopted (the default), the same pod is HAMi's: its warnings name HAMi's names
    mutation = mutate_pod(plain, {}, STAMP, A100_80)
    assert mutation.warnings[0] == (
        "container 'main': HAMi's nvidia.com/gpu: 1 → gpupool.io/gpu: 1 (a whole card)"
    )


def test_hamis_policy_annotations_on_a_gpupool_pod_are_said_to_be_unread() -> None:
    mutation = mutate_pod(
        pod({"gpupool.io/gpu-memory": "1Gi"}, {"hami.io/gpu-scheduler-policy": "spread"}),
        {},
        STAMP,
        A100_80,
    )
    assert mutation.gpu is not None
    assert mutation.warnings == (
        "HAMi's annotation hami.io/gpu-scheduler-policy is not read on a pod that asks in "
        "gpupool's names (gpupool.io/placement-policy chooses its placement policy)",
    )


# ---- nouse-gputype with models gpupool does not know ------------------------------------------


def test_nouse_gputype_naming_only_unknown_models_restricts_nothing() -> None:
    limits, annotations, warnings = admitted(
        {"nvidia.com/gpu": "2"}, {"nvidia.com/nouse-gputype": "1080,2080"}
    )
    assert limits["gpupool.io/gpu"] == "2"
    assert "gpupool.io/gpu-model" not in annotations
    assert (
        "HAMi's annotation nvidia.com/nouse-gputype: '1080', '2080' match no GPU model gpupool "
        "knows, so no card gpupool serves is one: ignored"
    ) in warnings
    assert (
        "HAMi's annotation nvidia.com/nouse-gputype: 1080,2080 → no gpupool.io/gpu-model "
        "(nothing to keep off)"
    ) in warnings


def test_nouse_gputype_excludes_the_known_and_ignores_the_unknown() -> None:
    _, annotations, warnings = admitted(
        {"nvidia.com/gpumem": "1000"}, {"nvidia.com/nouse-gputype": "T4,1080"}, MIXED
    )
    models = annotations["gpupool.io/gpu-model"].split("|")
    assert "T4" not in models and "A100-80GB" in models
    assert any("'1080' matches no GPU model gpupool knows" in w for w in warnings)


def test_use_gputype_with_an_unknown_model_is_still_refused() -> None:
    with pytest.raises(UnknownGpuModel, match="no GPU model gpupool knows matches '1080'"):
        mutate_pod(pod({"nvidia.com/gpu": "1"}, {"nvidia.com/use-gputype": "1080"}), {}, STAMP)


# ---- MIG profiles -----------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["containers", "initContainers"])
def test_a_mig_profile_is_refused_with_what_to_ask_instead(key: str) -> None:
    mig = pod({})
    mig["spec"][key] = [
        {"name": "m", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}},
        *mig["spec"].get(key, []),
    ]
    with pytest.raises(hami.MigNotSupported) as caught:
        mutate_pod(mig, {}, STAMP, A100_80)
    message = str(caught.value)
    kind = "container" if key == "containers" else "initContainer"
    assert message.startswith(f"{kind} 'm' asks for nvidia.com/mig-1g.10gb, an NVIDIA MIG")
    assert "gpupool.io/gpu-memory: 10Gi, or HAMi's nvidia.com/gpumem: 10240" in message


def test_a_mig_pod_left_to_nvidia_passes_unchanged() -> None:
    mig = pod({"nvidia.com/mig-1g.10gb": "1"}, {"gpupool.io/adopt-nvidia-gpu": "false"})
    assert mutate_pod(mig, {}, STAMP, A100_80).patch == []
    not_adopting = ClusterFacts(cards=A100_80.cards, adopt_nvidia_gpu=False)
    assert mutate_pod(pod({"nvidia.com/mig-1g.10gb": "1"}), {}, STAMP, not_adopting).patch == []
    with pytest.raises(hami.MigNotSupported):  # but never beside HAMi's or gpupool's names
        mutate_pod(
            pod({"nvidia.com/mig-1g.10gb": "1", "nvidia.com/gpumem": "10"}), {}, STAMP, not_adopting
        )


# ---- what the pod keeps of its translation ----------------------------------------------------


def test_the_translation_is_stamped_on_the_pod_with_the_review_it_came_in() -> None:
    original = pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"})
    mutation = mutate_pod(original, {}, STAMP, A100_80, review="review-1")
    stamped = applied(mutation.patch, original)["metadata"]["annotations"]["gpupool.io/translated"]
    assert json.loads(stamped) == {"review": "review-1", "lines": list(mutation.warnings)}
    assert mutation.translated == mutation.warnings
    plain = mutate_pod(pod({"gpupool.io/gpu-memory": "1Gi"}), {}, STAMP, A100_80, review="r")
    assert plain.translated == ()
    assert "gpupool.io/translated" not in applied(plain.patch, original)["metadata"]["annotations"]
