"""Typed errors for bad input: one class per kind, each message says what to fix."""

from __future__ import annotations


class GpupoolError(ValueError):
    """Base of every error gpupool raises for input a user can correct."""


class InvalidQuantity(GpupoolError):
    """A size such as `12Gi` could not be parsed, or is not positive."""


class QuantityOutOfRange(InvalidQuantity):
    """A quantity is beyond what gpupool reads (`domain.bounds`): too long, its exponent too
    large, or its magnitude above what Kubernetes holds. The message names the bound."""


class UnknownGpuModel(GpupoolError):
    """A GPU model name is not in the catalogue."""


class InvalidRequest(GpupoolError):
    """A workload's resource request is impossible or inconsistent."""


class InvalidNode(GpupoolError):
    """A node or GPU description is impossible or inconsistent."""


class InvalidGang(InvalidRequest):
    """A pod's gang marks (`gpupool.io/gang`, `gpupool.io/gang-size`) are unreadable, or disagree
    with the gang's other members."""


class RequestExceedsCluster(InvalidRequest):
    """A request can never fit: no node in the cluster is large enough."""


class InputFileError(GpupoolError):
    """A trace or scenario file is malformed; the message names file, line and column."""

    def __init__(self, path: str, line: int, column: str | int | None, problem: str) -> None:
        where = f"{path}:{line}"
        if column is not None:
            where += f": column {column}"
        super().__init__(f"{where}: {problem}")
        self.path = path
        self.line = line
        self.column = column
        self.problem = problem


class InvalidQuota(GpupoolError):
    """A tenant quota is impossible or inconsistent (or a cohort promises more than it has)."""
