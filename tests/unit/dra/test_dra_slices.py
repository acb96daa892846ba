"""The node's ResourceSlice: cards in, resource.k8s.io/v1 JSON out (pure)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupool.adapters.wire.names import DRA_DRIVER
from gpupool.domain.devices import Gpu
from gpupool.domain.errors import InvalidNode
from gpupool.domain.quantity import parse_quantity
from gpupool.domain.reserve import allocatable_bytes
from gpupool.domain.units import GiB, MiB
from gpupool.node.dra.slices import (
    MEMORY_STEP,
    SliceSettings,
    memory_limit,
    next_generation,
    resource_slice,
    resource_slice_spec,
)

A = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
B = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
GPUS = (
    Gpu(index=0, model="A100-80GB", uuid=A, numa_node=0, nvlink_domain=3),
    Gpu(index=1, model="T4", uuid=B, numa_node=1),
)
SETTINGS = SliceSettings(node="n1", reserve_pct=10, shares_per_card=4)


def q(text: str) -> int:
    value = parse_quantity(text)
    assert value.denominator == 1
    return int(value)


def test_one_device_per_card_with_its_attributes() -> None:
    obj = resource_slice(GPUS, SETTINGS, generation=1)
    assert obj["apiVersion"] == "resource.k8s.io/v1"
    assert obj["kind"] == "ResourceSlice"
    spec = obj["spec"]
    assert spec["driver"] == DRA_DRIVER == "gpu.gpupool.io"
    assert spec["nodeName"] == "n1"
    assert spec["pool"] == {"name": "n1", "generation": 1, "resourceSliceCount": 1}
    a, b = spec["devices"]
    assert (a["name"], b["name"]) == ("gpu-0", "gpu-1")
    assert a["attributes"] == {
        "model": {"string": "A100-80GB"},
        "uuid": {"string": A},
        "index": {"int": 0},
        "numaNode": {"int": 0},
        "resource.kubernetes.io/numaNode": {"int": 0},
        "nvlinkDomain": {"int": 3},
    }
    assert "nvlinkDomain" not in b["attributes"]  # no NVLink: no domain to match on
    assert a["allowMultipleAllocations"] is True


def test_memory_is_what_the_card_gives_after_the_reserve_in_whole_mib_steps() -> None:
    memory = resource_slice_spec(GPUS, SETTINGS)["devices"][0]["capacity"]["memory"]
    limit = allocatable_bytes(80 * GiB, 10) // MiB * MiB
    assert q(memory["value"]) == limit
    policy = memory["requestPolicy"]
    # a claim that asks nothing takes the card's whole share: capped, never unlimited
    assert q(policy["default"]) == limit
    assert {k: q(v) for k, v in policy["validRange"].items()} == {
        "min": MEMORY_STEP,
        "max": limit,
        "step": MEMORY_STEP,
    }
    assert limit % MEMORY_STEP == 0  # the API wants max and default whole steps


def test_an_odd_card_size_is_published_down_to_the_step() -> None:
    odd = Gpu(index=0, model="A100-80GB", uuid=A, memory_bytes=80 * GiB + 12345)
    assert memory_limit(odd, 10) % MEMORY_STEP == 0
    assert memory_limit(odd, 10) <= allocatable_bytes(80 * GiB + 12345, 10)


def test_compute_is_percent_uncapped_by_default_and_shares_are_one_per_claim() -> None:
    capacity = resource_slice_spec(GPUS, SETTINGS)["devices"][1]["capacity"]
    assert capacity["compute"] == {
        "value": "100",
        "requestPolicy": {"default": "0", "validRange": {"min": "0", "max": "100", "step": "1"}},
    }
    # the card's share count is kept: every claim consumes one of `shares_per_card`
    assert capacity["shares"] == {
        "value": "4",
        "requestPolicy": {"default": "1", "validValues": ["1"]},
    }


def test_an_unhealthy_card_is_left_out() -> None:
    sick = (GPUS[0], replace(GPUS[1], healthy=False))
    names = [d["name"] for d in resource_slice_spec(sick, SETTINGS)["devices"]]
    assert names == ["gpu-0"]


@pytest.mark.parametrize(
    ("settings", "gpus", "message"),
    [
        (replace(SETTINGS, shares_per_card=0), GPUS, "shares per card must be 1 or more"),
        (
            SETTINGS,
            tuple(Gpu(index=i, model="T4", uuid=f"GPU-{i}") for i in range(129)),
            "at most 128",
        ),
    ],
)
def test_impossible_settings_are_refused(
    settings: SliceSettings, gpus: tuple[Gpu, ...], message: str
) -> None:
    with pytest.raises(InvalidNode, match=message):
        resource_slice_spec(gpus, settings)


def test_the_generation_moves_only_when_the_spec_changes() -> None:
    first = resource_slice(
        GPUS, SETTINGS, next_generation(None, resource_slice_spec(GPUS, SETTINGS))
    )
    assert first["spec"]["pool"]["generation"] == 1
    same = resource_slice_spec(GPUS, SETTINGS)
    assert next_generation(first, same) == 1
    sick = resource_slice_spec((GPUS[0], replace(GPUS[1], healthy=False)), SETTINGS)
    assert next_generation(first, sick) == 2
