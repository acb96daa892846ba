"""The views' bad inputs: one typed error per kind, each saying what to do instead."""

from __future__ import annotations

from gpupool.domain.errors import GpupoolError


class UnknownNode(GpupoolError):
    """`--node NAME` names no GPU node gpupool knows (or that the caller may see)."""


class UnknownTenant(GpupoolError):
    """`--tenant NAME` names no tenant with a quota, a lease or a waiting pod."""
