"""Typed refusals of a ResourceClaim for `gpu.gpupool.io`: each message says what to fix."""

from __future__ import annotations

from gpupool.domain.errors import GpupoolError, InvalidRequest


class ClaimRefused(InvalidRequest):
    """A claim gpupool will not prepare or admit; the message names the claim and the fix."""


class MalformedCapacity(ClaimRefused):
    """A capacity request (or a consumed capacity) is not a quantity gpupool reads, or names a
    capacity the driver does not publish."""


class MemoryAboveEveryCard(ClaimRefused):
    """A claim asks more memory than any card gives to slices."""


class UnknownDeviceClass(ClaimRefused):
    """A claim names a DeviceClass that does not exist."""


class ClaimNotServable(ClaimRefused):
    """An allocated claim this node cannot honour now (card gone, unhealthy, full, other node)."""


class CheckpointCorrupt(GpupoolError):
    """A file in the DRA plugin's checkpoint folder cannot be read back; the message names it."""
