"""The real node's fake cards, named the way the project's fake CUDA driver names its devices.

In a container the limiter matches each line of its limits file (written by the device plugin
with the lease's card uuid) against the uuid the driver reports. The fake driver in native/
reports device d as GPU-fa4ec0de-0000-0000-0000-0000000000dd and always shows its devices from
0, so the agent on the real node must give its cards those uuids, and a container that is given
card d sees it as device 0 only for d = 0: the real node therefore fakes one card (two pods
share it, each with its own slice). NVIDIA's toolkit, which picks the physical card for
NVIDIA_VISIBLE_DEVICES, has no such limit on a GPU node.
"""

from __future__ import annotations

from dataclasses import replace

from gpupool.devcluster.errors import InvalidClusterSpec
from gpupool.node.nvml import FakeInventory

DEFAULT_GPUS = "1xA100-80GB"


def driver_uuid(index: int) -> str:
    """The uuid native/tests/fake/fake_cuda.c and fake_nvml.c report for device `index`."""
    return f"GPU-fa4ec0de-0000-0000-0000-0000000000{index:02x}"


def driver_matched_inventory(spec: str, *, node: str) -> FakeInventory:
    """`FakeInventory.from_spec`, with each card renamed to the fake driver's uuid."""
    cards = FakeInventory.from_spec(spec, node=node).devices()
    if len(cards) != 1:
        raise InvalidClusterSpec(
            f"real node GPUs {spec!r}: the fake driver shows every container its device 0, so "
            f"the real node fakes exactly one card (for example {DEFAULT_GPUS})"
        )
    return FakeInventory([replace(card, uuid=driver_uuid(card.index)) for card in cards])
