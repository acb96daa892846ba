"""What a typed read of the API server hands the controllers (`ports.ClusterApi`): each object
decoded once at the edge, with the reference an Event or a write names it by, and the objects
that did not decode, each with why (a loop's containment sets them aside and says so).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from gpupool.state.status_writes import NO_STATUS, StoredStatus

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ObjectReference:
    """An object as an Event's `involvedObject` names it (and a write finds it): kind,
    apiVersion, name, namespace (None: cluster-scoped), uid and resourceVersion (None: not
    known, for an object named by a loop rather than read)."""

    kind: str
    api_version: str
    name: str
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None

    @property
    def key(self) -> str:
        """namespace/name, or name for a cluster-scoped object ("?" for a missing name)."""
        name = self.name or "?"
        return f"{self.namespace}/{name}" if self.namespace else name


@dataclass(frozen=True, slots=True)
class Unreadable:
    """An object whose decoding raised: `error` is what the decoder raised (its type and message
    go into the ReconcileFailed Event and the log)."""

    ref: ObjectReference
    error: Exception


@dataclass(frozen=True, slots=True)
class Listed(Generic[T]):
    """The objects of one read, in the order the API server (or the watch cache) gave them:
    `read`, each decoded value with its reference; `unreadable`, those that did not decode;
    `stored`, for the kinds whose status the controller writes (GpuQuota, GpuNode, GpuPool), each
    read object's status as the API server holds it, decoded, by key: what a status writer
    compares its own with (to write only a change) and keeps (the conditions others wrote)."""

    read: tuple[tuple[T, ObjectReference], ...] = ()
    unreadable: tuple[Unreadable, ...] = ()
    stored: Mapping[str, StoredStatus] = field(default_factory=dict)

    def status_of(self, key: str) -> StoredStatus:
        """The stored status of the object of `key` (none: an empty one)."""
        return self.stored.get(key, NO_STATUS)

    @property
    def values(self) -> list[T]:
        """The decoded values (what does not decode is left out)."""
        return [value for value, _ in self.read]

    def __iter__(self) -> Iterator[tuple[T, ObjectReference]]:
        return iter(self.read)
