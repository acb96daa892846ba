"""The node's ResourceSlice for the DRA driver `gpu.gpupool.io`: pure, cards in, JSON out.

One device per healthy card (`gpu-<index>`), shared by several claims (`allowMultipleAllocations`,
Kubernetes' consumable capacity, KEP-5075). Each device publishes:

- attributes `model` (the catalogue name, as `gpupool.io/gpu-model` names it), `uuid`, `index`,
  `numaNode` (also as Kubernetes' standard `resource.kubernetes.io/numaNode`) and, for
  NVLink-connected cards, `nvlinkDomain` (cards sharing one are peers);
- capacity `memory`: the bytes a card gives to slices (its memory less the node's reserve, down
  to the step), which a claim consumes as asked (`capacity.requests.memory`), in steps of
  MEMORY_STEP, all of it when it does not ask (a whole card);
- capacity `compute`: percent of the card's SMs, 0..100 in steps of 1; a claim that does not ask
  consumes 0 and runs without a hard SM cap, as a pod without `gpupool.io/gpu-compute` does;
- capacity `shares`: the card's share count (the device plugin's `--vgpu-per-card`), of which
  every claim consumes exactly 1, so no more claims share a card than the device plugin allows.

An unhealthy card is left out: the scheduler then places nothing new on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpupool.adapters.wire.claims import (
    CAPACITY_COMPUTE,
    CAPACITY_MEMORY,
    CAPACITY_SHARES,
    COMPUTE_FULL,
)
from gpupool.adapters.wire.names import DRA_DRIVER
from gpupool.domain.devices import SHARES_PER_CARD, Gpu
from gpupool.domain.dra_capacity import MEMORY_STEP, publishable_memory
from gpupool.domain.errors import InvalidNode
from gpupool.domain.quantity import format_quantity
from gpupool.domain.reserve import DEFAULT_RESERVE_PCT, allocatable_bytes

RESOURCE_API_VERSION = "resource.k8s.io/v1"

ATTR_MODEL = "model"
ATTR_UUID = "uuid"
ATTR_INDEX = "index"
ATTR_NUMA = "numaNode"
ATTR_NVLINK = "nvlinkDomain"
# Kubernetes' standard NUMA attribute (k8s.io/dynamic-resource-allocation/deviceattribute), so a
# claim can ask a GPU and another driver's NIC on one NUMA node with matchAttribute
ATTR_STANDARD_NUMA = "resource.kubernetes.io/numaNode"

MAX_DEVICES = 128  # resource.k8s.io/v1 ResourceSliceMaxDevices
DEVICE_PREFIX = "gpu-"


def device_name(gpu: Gpu) -> str:
    """The card's device name in the pool (a DNS label): `gpu-<index>`."""
    return f"{DEVICE_PREFIX}{gpu.index}"


def memory_limit(gpu: Gpu, reserve_pct: float = DEFAULT_RESERVE_PCT) -> int:
    """The bytes of `gpu` that claims may consume: allocatable after the reserve, down to the
    step (the API wants the range's max a whole number of steps)."""
    total = gpu.total_memory
    if total is None:
        raise InvalidNode(
            f"GPU {gpu.index} ({gpu.uuid}): its memory size is unknown, so the DRA driver cannot "
            f"publish it; give the fake spec a size or check NVML"
        )
    return publishable_memory(allocatable_bytes(total, reserve_pct))


def pool_name(node: str) -> str:
    """One pool per node, named after it (as other node-local DRA drivers do)."""
    return node


def slice_name(node: str) -> str:
    return f"{node}-{DRA_DRIVER}"


def _q(amount: int) -> str:
    return format_quantity(amount)


def device_json(gpu: Gpu, reserve_pct: float, shares: int) -> dict[str, Any]:
    """One card as a resource.k8s.io/v1 Device."""
    limit = memory_limit(gpu, reserve_pct)
    if limit < MEMORY_STEP:
        raise InvalidNode(
            f"GPU {gpu.index} ({gpu.uuid}) has {limit} bytes left after the {reserve_pct:g}% "
            f"reserve; lower the agent's --reserve-pct"
        )
    attributes: dict[str, dict[str, object]] = {
        ATTR_MODEL: {"string": gpu.model},
        ATTR_UUID: {"string": gpu.uuid},
        ATTR_INDEX: {"int": gpu.index},
        ATTR_NUMA: {"int": gpu.numa_node},
        ATTR_STANDARD_NUMA: {"int": gpu.numa_node},
    }
    if gpu.nvlink_domain is not None:
        attributes[ATTR_NVLINK] = {"int": gpu.nvlink_domain}
    return {
        "name": device_name(gpu),
        "attributes": attributes,
        "allowMultipleAllocations": True,
        "capacity": {
            CAPACITY_MEMORY: {
                "value": _q(limit),
                "requestPolicy": {
                    "default": _q(limit),
                    "validRange": {
                        "min": _q(MEMORY_STEP),
                        "max": _q(limit),
                        "step": _q(MEMORY_STEP),
                    },
                },
            },
            CAPACITY_COMPUTE: {
                "value": _q(COMPUTE_FULL),
                "requestPolicy": {
                    "default": "0",
                    "validRange": {"min": "0", "max": _q(COMPUTE_FULL), "step": "1"},
                },
            },
            CAPACITY_SHARES: {
                "value": _q(shares),
                "requestPolicy": {"default": "1", "validValues": ["1"]},
            },
        },
    }


@dataclass(frozen=True, slots=True)
class SliceSettings:
    node: str
    reserve_pct: float = DEFAULT_RESERVE_PCT
    shares_per_card: int = SHARES_PER_CARD


def resource_slice_spec(gpus: Sequence[Gpu], settings: SliceSettings) -> dict[str, Any]:
    """The slice's spec without the pool's generation (the publisher counts that)."""
    if settings.shares_per_card < 1:
        raise InvalidNode(f"shares per card must be 1 or more; got {settings.shares_per_card}")
    healthy = sorted((g for g in gpus if g.healthy), key=lambda g: g.index)
    if len(healthy) > MAX_DEVICES:
        raise InvalidNode(
            f"node {settings.node} has {len(healthy)} cards; one ResourceSlice holds at most "
            f"{MAX_DEVICES}"
        )
    return {
        "driver": DRA_DRIVER,
        "nodeName": settings.node,
        "pool": {"name": pool_name(settings.node), "resourceSliceCount": 1},
        "devices": [
            device_json(g, settings.reserve_pct, settings.shares_per_card) for g in healthy
        ],
    }


def resource_slice(gpus: Sequence[Gpu], settings: SliceSettings, generation: int) -> dict[str, Any]:
    """The node's whole ResourceSlice object, its pool at `generation`."""
    spec = resource_slice_spec(gpus, settings)
    spec["pool"] = {**spec["pool"], "generation": generation}
    return {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"name": slice_name(settings.node)},
        "spec": spec,
    }


def next_generation(published: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> int:
    """The pool generation to publish `wanted` (a spec from resource_slice_spec) with: the
    published one when nothing changed, one more when something did (the scheduler then drops
    what it cached of the older generation), 1 for a first slice."""
    if published is None:
        return 1
    spec = dict(published.get("spec") or {})
    pool = dict(spec.get("pool") or {})
    generation = int(pool.pop("generation", 0) or 0)
    spec["pool"] = pool
    same = {k: spec.get(k) for k in wanted} == dict(wanted)
    return generation if same and generation > 0 else generation + 1
