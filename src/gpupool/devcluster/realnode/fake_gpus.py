"""The real node's fake cards, named the way the project's fake CUDA driver names its devices.

In a container the limiter matches each line of its limits file (written by the device plugin
with the lease's card uuid) against the uuid the driver reports. The fake driver in native/
names card c of the fake node GPU-fa4ec0de-0000-0000-0000-0000000000cc, so the agent on the real
node gives its cards those uuids. A container sees the cards its FAKE_CUDA_UUIDS names, numbered
from 0, which the runc wrapper (fake_toolkit.py) sets from the NVIDIA_VISIBLE_DEVICES the device
plugin gives it, as NVIDIA's toolkit shows a container the cards named there: a pod placed on
card 1 sees card 1's uuid as its device 0.
"""

from __future__ import annotations

from dataclasses import replace

from gpupool.devcluster.errors import InvalidClusterSpec
from gpupool.node.nvml import FakeInventory

DEFAULT_GPUS = "2xA100-80GB"
# native/tests/fake: the fake driver knows eight cards (MAX_DEVICES there).
MAX_CARDS = 8


def driver_uuid(index: int) -> str:
    """The uuid native/tests/fake/fake_cuda.c and fake_nvml.c report for card `index`."""
    return f"GPU-fa4ec0de-0000-0000-0000-0000000000{index:02x}"


def driver_matched_inventory(spec: str, *, node: str) -> FakeInventory:
    """`FakeInventory.from_spec`, with each card renamed to the fake driver's uuid."""
    cards = FakeInventory.from_spec(spec, node=node).devices()
    if len(cards) > MAX_CARDS:
        raise InvalidClusterSpec(
            f"real node GPUs {spec!r}: the fake driver knows {MAX_CARDS} cards at most "
            f"(for example {DEFAULT_GPUS})"
        )
    return FakeInventory([replace(card, uuid=driver_uuid(card.index)) for card in cards])
