"""Typed errors for Kubernetes objects gpupool cannot read; each says which object and what."""

from __future__ import annotations

from gpupool.domain.errors import GpupoolError


class InvalidObject(GpupoolError):
    """A Kubernetes object (GpuLease, GpuNode, GpuQuota, node) is missing a field or malformed."""

    def __init__(self, kind: str, name: str, problem: str) -> None:
        super().__init__(f"{kind} {name or '<unnamed>'}: {problem}")
        self.kind = kind
        self.name = name
        self.problem = problem


class CrdFileError(GpupoolError):
    """A CRD manifest could not be read or is not a CustomResourceDefinition."""
