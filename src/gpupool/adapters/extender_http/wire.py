"""kube-scheduler's extender/v1 wire types (k8s.io/kube-scheduler/extender/v1/types.go).

The Go structs carry no json tags, so the keys are the Go field names: `Pod`, `Nodes`,
`NodeNames`, `FailedNodes`, `FailedAndUnresolvableNodes`, `Error`, `Host`, `Score`, `PodName`,
`PodNamespace`, `PodUID`, `Node`. Parsing is strict about types and raises MalformedExtenderRequest
(answered with HTTP 400) with a message that names the field. The pod is decoded here, by the
one pod decoder (`ScheduledPod.from_json`: a pod version filter decoded is not decoded again for
prioritize, bind or a gang's listing); a pod whose GPU request is wrong still decodes (every node
refuses it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod
from gpupool.domain.errors import GpupoolError

MAX_EXTENDER_PRIORITY = 10


class MalformedExtenderRequest(GpupoolError):
    """The body of an extender call is not what kube-scheduler's extender/v1 sends."""


def json_type(value: object) -> str:
    """The JSON name of a decoded value's type (the caller wrote JSON, not Python)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _obj(body: object, what: str) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise MalformedExtenderRequest(f"{what} must be a JSON object; got {json_type(body)}")
    return body


def _str(body: Mapping[str, Any], key: str, what: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value:
        got = f'"{value}"' if isinstance(value, str) else json_type(value)  # only "" is a str here
        raise MalformedExtenderRequest(f"{what}: {key} must be a non-empty string; got {got}")
    return value


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    """Filter and prioritize input. With nodeCacheCapable only NodeNames is set."""

    pod: ScheduledPod
    node_names: tuple[str, ...]

    @classmethod
    def from_json(cls, body: object) -> ExtenderArgs:
        data = _obj(body, "ExtenderArgs")
        pod = data.get("Pod")
        if not isinstance(pod, Mapping) or not isinstance(pod.get("metadata"), Mapping):
            raise MalformedExtenderRequest("ExtenderArgs: Pod must be a pod object with metadata")
        names = data.get("NodeNames")
        if names is None:
            nodes = data.get("Nodes")
            if isinstance(nodes, Mapping) and isinstance(nodes.get("items"), list):
                names = [((n or {}).get("metadata") or {}).get("name") for n in nodes["items"]]
            else:
                raise MalformedExtenderRequest(
                    "ExtenderArgs: NodeNames must be a list of node names "
                    "(the extender runs with nodeCacheCapable: true)"
                )
        # (set of types and `in`: C loops, not one Python test per name of 5,000)
        if not isinstance(names, list) or (
            names and (set(map(type, names)) != {str} or "" in names)
        ):
            raise MalformedExtenderRequest("ExtenderArgs: NodeNames must be a list of node names")
        return cls(pod=ScheduledPod.from_json(pod), node_names=tuple(names))


@dataclass(frozen=True, slots=True)
class ExtenderFilterResult:
    node_names: tuple[str, ...] | None = None
    failed_nodes: Mapping[str, str] = field(default_factory=dict)
    failed_and_unresolvable: Mapping[str, str] = field(default_factory=dict)
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "Nodes": None,
            "NodeNames": None if self.node_names is None else list(self.node_names),
            "FailedNodes": dict(self.failed_nodes),
            "FailedAndUnresolvableNodes": dict(self.failed_and_unresolvable),
            "Error": self.error,
        }


@dataclass(frozen=True, slots=True)
class HostPriority:
    host: str
    score: int

    def to_json(self) -> dict[str, Any]:
        return {"Host": self.host, "Score": self.score}


@dataclass(frozen=True, slots=True)
class ExtenderBindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str

    @classmethod
    def from_json(cls, body: object) -> ExtenderBindingArgs:
        data = _obj(body, "ExtenderBindingArgs")
        what = "ExtenderBindingArgs"
        return cls(
            pod_name=_str(data, "PodName", what),
            pod_namespace=_str(data, "PodNamespace", what),
            pod_uid=_str(data, "PodUID", what),
            node=_str(data, "Node", what),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "PodName": self.pod_name,
            "PodNamespace": self.pod_namespace,
            "PodUID": self.pod_uid,
            "Node": self.node,
        }


@dataclass(frozen=True, slots=True)
class ExtenderBindingResult:
    error: str = ""
    # Why the bind was refused (a `refusal.Why` value), for /metrics only: not on the wire.
    reason: str = ""

    @classmethod
    def refused(cls, why: str, message: str) -> ExtenderBindingResult:
        return cls(message, why)

    def to_json(self) -> dict[str, Any]:
        return {"Error": self.error}
