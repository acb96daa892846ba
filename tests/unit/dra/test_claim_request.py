"""A claim on gpu.gpupool.io read as gpupool's own request (`wire.claim_request`), and the pod
view the controllers read from the ask the webhook wrote."""

from __future__ import annotations

from typing import Any

import pytest

from gpupool.adapters.kubernetes.pod_view import read_pod
from gpupool.adapters.wire import names
from gpupool.adapters.wire.claim_request import (
    ClaimAsk,
    claim_ask,
    from_annotation,
    looks_like_ours,
    request_of,
    to_annotation,
)
from gpupool.adapters.wire.claims import (
    CardOffer,
    ClaimRefused,
    MalformedCapacity,
    MemoryAboveEveryCard,
    UnknownDeviceClass,
)
from gpupool.domain.units import GiB

CARDS = [CardOffer("A100-80GB", 72 * GiB)]
A100 = "device.attributes['gpu.gpupool.io'].model == 'A100-80GB'"


def spec(*requests: dict[str, Any]) -> dict[str, Any]:
    return {"devices": {"requests": list(requests)}}


def exactly(
    name: str = "gpu", cls: str = "gpu.gpupool.io", selectors: list[str] = (), **more: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": cls, **more}
    if selectors:
        body["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return {"name": name, "exactly": body}


def mem(memory: str, compute: str | None = None) -> dict[str, Any]:
    requests = {"memory": memory} | ({"compute": compute} if compute else {})
    return {"capacity": {"requests": requests}}


def test_a_12gi_claim_is_12gi_and_its_compute_on_the_model_its_selector_names() -> None:
    ask = claim_ask("gpu", spec(exactly(selectors=[A100], **mem("12Gi", "30"))), CARDS, "t")
    assert ask == ClaimAsk("gpu", "gpu", 12 * GiB, 30, 1, ("A100-80GB",))
    request = request_of(ask, "infer", "team-a", 5)
    assert (request.gpu_count, request.gpu_memory_bytes, request.compute_pct) == (1, 12 * GiB, 30)
    assert (request.models, request.tenant, request.priority) == (("A100-80GB",), "team-a", 5)
    assert request.is_share


def test_a_size_that_is_no_whole_mib_is_asked_rounded_up_as_it_is_consumed() -> None:
    # the driver's capacity comes in 1 MiB steps (kube-scheduler rounds a request up too): the
    # planner places what will be consumed, and the task never gets less than it wrote
    ask = claim_ask("gpu", spec(exactly(**mem("1000000000"))), CARDS, "t")
    assert ask.memory_bytes == 954 * 1024 * 1024  # 953.67 MiB, up to 954


def test_a_claim_without_capacity_takes_whole_cards() -> None:
    ask = claim_ask("gpu", spec(exactly(count=2)), CARDS, "t")
    assert ask is not None and ask.count == 2 and ask.memory_bytes is None
    assert request_of(ask, "p", "t", 0).whole_cards


def test_an_in_selector_names_several_models_and_selectors_intersect() -> None:
    both = "device.attributes['gpu.gpupool.io'].model in ['A100-80GB', 'H100-80GB']"
    ask = claim_ask("gpu", spec(exactly(selectors=[both])), CARDS, "t")
    assert ask is not None and ask.models == ("A100-80GB", "H100")
    ask = claim_ask("gpu", spec(exactly(selectors=[both, A100])), CARDS, "t")
    assert ask is not None and ask.models == ("A100-80GB",)


def test_other_drivers_claims_are_not_ours() -> None:
    assert claim_ask("nic", spec(exactly(cls="nic.example.com")), CARDS, "t") is None
    assert not looks_like_ours("gpu.nvidia.com")


def test_a_misspelt_class_is_refused_with_the_right_name() -> None:
    assert looks_like_ours("gpu.gpupool")
    with pytest.raises(UnknownDeviceClass, match=r"deviceClassName: gpu\.gpupool\.io"):
        claim_ask("gpu", spec(exactly(cls="gpu.gpupool")), CARDS, "t")


@pytest.mark.parametrize(
    ("claim", "error", "fix"),
    [
        (spec(exactly(**mem("100Gi"))), MemoryAboveEveryCard, "ask for at most 72Gi"),
        (spec(exactly(**mem("12 GB"))), MalformedCapacity, "such as 12Gi"),
        (spec(exactly(**mem("12Gi", "150"))), MalformedCapacity, "from 1 to 100"),
        (
            spec(exactly(selectors=["device.attributes['gpu.gpupool.io'].uuid == 'x'"])),
            ClaimRefused,
            "reads only selectors on the card model",
        ),
        (
            spec(exactly(selectors=["device.attributes['gpu.gpupool.io'].model == 'Z99'"])),
            ClaimRefused,
            "Z99",
        ),
        (spec(exactly("a"), exactly("b")), ClaimRefused, "one request with count: N"),
        (spec(exactly(allocationMode="All")), ClaimRefused, "allocationMode: ExactCount"),
        (
            spec(
                {
                    "name": "g",
                    "firstAvailable": [{"name": "x", "deviceClassName": "gpu.gpupool.io"}],
                }
            ),
            ClaimRefused,
            "with `exactly`",
        ),
    ],
)
def test_bad_claims_are_refused_naming_the_fix(
    claim: dict[str, Any], error: type[Exception], fix: str
) -> None:
    with pytest.raises(error, match=fix):
        claim_ask("gpu", claim, CARDS, "ResourceClaimTemplate ns/t")


def test_the_annotation_round_trips_and_a_forged_one_is_refused() -> None:
    ask = ClaimAsk("gpu", "r", 12 * GiB, None, 2, ("A100-80GB",))
    assert from_annotation(to_annotation(ask), "p") == ask
    with pytest.raises(ClaimRefused, match="create the pod again"):
        from_annotation('{"claim": "gpu"}', "p")


def _claim_pod(annotation: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "infer",
            "namespace": "team-a",
            "uid": "u1",
            "labels": {names.LABEL_TENANT: "team-a"},
            "annotations": {names.ANN_CLAIM: annotation},
        },
        "spec": {
            "containers": [{"name": "c", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "a100-12gi"}],
            "schedulingGates": [{"name": names.QUOTA_GATE}],
            "priority": 3,
        },
    }


def test_the_controllers_see_a_claim_pod_as_the_same_gpu_request() -> None:
    ask = ClaimAsk("gpu", "gpu", 12 * GiB, 30, 1, ("A100-80GB",))
    view = read_pod(_claim_pod(to_annotation(ask)))
    assert view.request == request_of(ask, "infer", "team-a", 3)
    assert view.gated and view.problem is None


def test_a_claim_pod_with_a_garbled_ask_is_a_problem_not_a_free_pod() -> None:
    view = read_pod(_claim_pod("{nonsense"))
    assert view.request is None and view.problem is not None and "gpupool.io/claim" in view.problem
