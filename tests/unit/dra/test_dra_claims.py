"""Claims on gpu.gpupool.io decoded once: what a claim asks (checked against the cards) and what
the scheduler allocated to it. Bad input is refused with a message that names the fix."""

from __future__ import annotations

from typing import Any

import pytest
from support.dra import claim_json, mps_config, result

from gpupool.adapters.wire.names import DRA_DRIVER
from gpupool.domain.units import GiB
from gpupool.node.dra.claims import (
    AllocatedDevice,
    Ask,
    CardOffer,
    ClaimRef,
    check_claim_spec,
    read_allocated_claim,
)
from gpupool.node.dra.errors import (
    ClaimNotServable,
    ClaimRefused,
    MalformedCapacity,
    MemoryAboveEveryCard,
    UnknownDeviceClass,
)

CARDS = (CardOffer("A100-80GB", 72 * GiB), CardOffer("T4", 13 * GiB))


def spec(*requests: dict[str, Any]) -> dict[str, Any]:
    return {"devices": {"requests": list(requests)}}


def exactly(name: str = "gpu", cls: str = DRA_DRIVER, **capacity: object) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": cls}
    if capacity:
        body["capacity"] = {"requests": capacity}
    return {"name": name, "exactly": body}


def test_memory_and_compute_are_read_as_asked() -> None:
    asks = check_claim_spec(spec(exactly(memory="12Gi", compute="30")), CARDS)
    assert asks == (Ask("gpu", 12 * GiB, 30, 1),)


def test_a_claim_without_capacity_asks_a_whole_card() -> None:
    assert check_claim_spec(spec(exactly()), CARDS) == (Ask("gpu", None, None, 1),)


def test_qualified_capacity_names_and_first_available_are_read() -> None:
    request = {
        "name": "gpu",
        "firstAvailable": [
            {"name": "big", "deviceClassName": DRA_DRIVER,
             "capacity": {"requests": {f"{DRA_DRIVER}/memory": "40Gi"}}},
            {"name": "small", "deviceClassName": DRA_DRIVER,
             "capacity": {"requests": {"memory": "8Gi"}}},
        ],
    }  # fmt: skip
    asks = check_claim_spec(spec(request), CARDS)
    assert [(a.request, a.memory_bytes) for a in asks] == [
        ("gpu/big", 40 * GiB),
        ("gpu/small", 8 * GiB),
    ]


def test_requests_on_other_known_classes_are_not_gpupools_to_check() -> None:
    other = exactly("nic", cls="nic.example.com", memory="not-a-quantity")
    asks = check_claim_spec(spec(other), CARDS, known_classes=(DRA_DRIVER, "nic.example.com"))
    assert asks == ()


@pytest.mark.parametrize(
    ("request_", "error", "message"),
    [
        (
            exactly(memory="100Gi"),
            MemoryAboveEveryCard,
            r"asks for 100Gi of GPU memory but the largest card gives 72Gi \(A100-80GB\); ask "
            r"for at most 72Gi",
        ),
        (exactly(cls="gpu.gpupool"), UnknownDeviceClass, "deviceClassName: gpu.gpupool.io"),
        (exactly(memory="12 GB"), MalformedCapacity, "byte quantity such as 12Gi"),
        (exactly(memory="-1Gi"), MalformedCapacity, "positive byte quantity"),
        (exactly(compute="150"), MalformedCapacity, "whole percentage .* from 1 to 100"),
        (exactly(compute="0.5"), MalformedCapacity, "whole percentage"),
        (exactly(cores="30"), MalformedCapacity, "publishes no capacity 'cores'; ask for memory"),
        (exactly(shares="2"), MalformedCapacity, "exactly one share"),
        (
            {"name": "gpu", "exactly": {"deviceClassName": DRA_DRIVER, "capacity": "12Gi"}},
            MalformedCapacity,
            "capacity must be",
        ),
    ],
)
def test_bad_claims_are_refused_naming_what_to_fix(
    request_: dict[str, Any], error: type[ClaimRefused], message: str
) -> None:
    with pytest.raises(error, match=message) as raised:
        check_claim_spec(spec(request_), CARDS, who="claim team/train")
    assert "claim team/train: request 'gpu'" in str(raised.value)


def test_an_allocation_is_read_with_its_consumed_capacity() -> None:
    raw = claim_json(
        "train",
        result("gpu-0", memory="12Gi", compute="30"),
        result("nic-0", driver="nic.example.com"),  # another driver's: not ours to prepare
        config=mps_config(),
    )
    claim = read_allocated_claim(raw, "uid-train")
    assert claim.ref == ClaimRef("team", "train", "uid-train")
    assert claim.devices == (AllocatedDevice("gpu", "n1", "gpu-0", "share-1", 12 * GiB, 30),)
    assert claim.compute_mode == "mps"
    assert (claim.pod, claim.pod_uid) == ("team/trainer-0", "uid-trainer-0")


def test_an_allocation_without_consumed_capacity_leaves_it_to_the_card() -> None:
    claim = read_allocated_claim(claim_json("w", result("gpu-1")), "uid-w")
    assert (claim.devices[0].memory_bytes, claim.devices[0].compute_pct) == (None, None)
    assert claim.compute_mode is None


@pytest.mark.parametrize(
    ("raw", "uid", "message"),
    [
        (claim_json("w", result("gpu-0")), "uid-other", "was deleted and made again"),
        (claim_json("w", allocated=False), "uid-w", "not allocated yet"),
        (
            claim_json("w", result("gpu-0", memory="lots")),
            "uid-w",
            "consumedCapacity.memory must be a positive byte quantity",
        ),
    ],
)
def test_an_allocation_gpupool_cannot_read_is_refused(
    raw: dict[str, Any], uid: str, message: str
) -> None:
    with pytest.raises(ClaimRefused, match=message):
        read_allocated_claim(raw, uid)


def test_an_unknown_compute_mode_is_refused() -> None:
    config = mps_config()
    config[0]["opaque"]["parameters"]["computeMode"] = "timeslice"
    with pytest.raises(MalformedCapacity, match="write 'mps' or 'none'"):
        read_allocated_claim(claim_json("w", result("gpu-0"), config=config), "uid-w")


def test_claim_not_servable_is_a_claim_refusal() -> None:
    assert issubclass(ClaimNotServable, ClaimRefused)
