"""Typed refusals of a ResourceClaim for `gpu.gpupool.io`: each message says what to fix."""

from __future__ import annotations

from gpupool.adapters.wire.claims import (
    ClaimRefused,
    MalformedCapacity,
    MemoryAboveEveryCard,
    UnknownDeviceClass,
)
from gpupool.domain.errors import GpupoolError

# The refusals of a claim's spec live with `check_claim_spec` (adapters.wire.claims), which the
# webhook and the controller run too; they are named here as the node side always named them.
__all__ = [
    "CheckpointCorrupt",
    "ClaimNotServable",
    "MalformedCapacity",
    "MemoryAboveEveryCard",
    "UnknownDeviceClass",
]


class ClaimNotServable(ClaimRefused):
    """An allocated claim this node cannot honour now (card gone, unhealthy, full, other node)."""


class CheckpointCorrupt(GpupoolError):
    """A file in the DRA plugin's checkpoint folder cannot be read back; the message names it."""
