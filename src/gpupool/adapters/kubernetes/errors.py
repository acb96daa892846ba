"""Typed errors of the Kubernetes adapter.

- `InvalidObject`, `CrdFileError`: an object or manifest gpupool cannot read (bad input: each
  says which object and what is wrong);
- `KubeconfigError`: no usable credentials or context;
- `ApiServerError` and its kinds: the API server answered a request with an error status. Every
  HTTP path gpupool writes through (lightkube, the bind writer in `fast_post`) raises these, so a
  caller tells "already exists" from "not found" from the rest by type, never by a status code
  of some library's exception.
"""

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


class KubeconfigError(Exception):
    """The kubeconfig (or in-cluster account) cannot be used: no context, or credentials a
    client does not support."""


class ApiServerError(Exception):
    """The API server answered with an error status (`code`, its Status message)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"API server answered {code}: {message}")
        self.code = code
        self.message = message


class NotFound(ApiServerError):
    """404: the object (or its namespace) does not exist."""


class Conflict(ApiServerError):
    """409: the object already exists, or was modified since it was read."""


def api_error(code: int, message: str) -> ApiServerError:
    """The typed error for an error status."""
    kind = {404: NotFound, 409: Conflict}.get(code, ApiServerError)
    return kind(code, message)
