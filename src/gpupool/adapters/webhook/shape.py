"""The JSON shape of the objects the webhook reads, checked once at the edge (pure).

The API server only sends well-typed pods, but the webhook answers whoever reaches its port, and
its decisions index into the object as a Pod is shaped. So before any decision, every part of a
pod or GpuQuota that gpupool reads is checked to have its Kubernetes type; anything else is
refused with MalformedObject naming the field and the type it must have, never with Python's
own words for the mismatch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpupool.domain.errors import GpupoolError


class MalformedObject(GpupoolError):
    """A field of the object under review does not have its Kubernetes type."""


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _fail(path: str, wanted: str, value: object) -> MalformedObject:
    return MalformedObject(f"{path} must be {wanted}; got {_kind(value)}")


def _object(value: object, path: str) -> Mapping[str, Any]:
    """`value` as an object; a missing (null) field reads as empty."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _fail(path, "an object", value)
    return value


def _list(value: object, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _fail(path, "a list", value)
    return value


def _string_map(value: object, path: str) -> None:
    for key, item in _object(value, path).items():
        if not isinstance(item, str):
            raise _fail(f"{path}[{key!r}]", "a string", item)


def _optional(value: object, path: str, wanted: type, name: str) -> None:
    if value is not None and (not isinstance(value, wanted) or isinstance(value, bool)):
        raise _fail(path, name, value)


def _quantities(value: object, path: str) -> None:
    for key, item in _object(value, path).items():
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise _fail(f"{path}[{key!r}]", "a quantity (a string such as 12Gi, or a number)", item)


def _containers(value: object, path: str) -> None:
    for i, container in enumerate(_list(value, path)):
        where = f"{path}[{i}]"
        if not isinstance(container, dict):
            raise _fail(where, "an object", container)
        fields: Mapping[str, Any] = container
        _optional(fields.get("name"), f"{where}.name", str, "a string")
        resources = _object(fields.get("resources"), f"{where}.resources")
        for part in ("limits", "requests"):
            _quantities(resources.get(part), f"{where}.resources.{part}")


def check_metadata(obj: Mapping[str, Any]) -> None:
    meta = _object(obj.get("metadata"), "metadata")
    for key in ("name", "generateName", "namespace"):
        _optional(meta.get(key), f"metadata.{key}", str, "a string")
    _string_map(meta.get("labels"), "metadata.labels")
    _string_map(meta.get("annotations"), "metadata.annotations")


def check_pod(pod: Mapping[str, Any]) -> None:
    """MalformedObject unless every field gpupool reads from `pod` has its Pod type."""
    check_metadata(pod)
    spec = _object(pod.get("spec"), "spec")
    for key in ("containers", "initContainers", "ephemeralContainers"):
        _containers(spec.get(key), f"spec.{key}")
    for i, gate in enumerate(_list(spec.get("schedulingGates"), "spec.schedulingGates")):
        where = f"spec.schedulingGates[{i}]"
        if not isinstance(gate, dict):
            raise _fail(where, "an object", gate)
        _optional(gate.get("name"), f"{where}.name", str, "a string")
    for key in ("nodeName", "schedulerName"):
        _optional(spec.get(key), f"spec.{key}", str, "a string")
    _optional(spec.get("priority"), "spec.priority", int, "a whole number")


def check_quota(quota: Mapping[str, Any]) -> None:
    """MalformedObject unless the GpuQuota's metadata and spec are objects."""
    check_metadata(quota)
    _object(quota.get("spec"), "spec")
