"""The objects of one kind as the last list and the watch events since have left them: what the
controller and the web view read instead of listing the API server every round.

Pure: no client, no clock. The adapter that feeds it (`adapters.kubernetes.watch_cache`) lists
once, hands each watch event to `apply`, and on a relist (a watch whose version is gone) hands
the whole list to `replace`, which says what changed in between so no change is lost to the
loops that wait on them. Objects are kept as the API server sent them (JSON dicts) and are
never modified here; a reader must not modify them either.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

Obj = Mapping[str, Any]


class Event(Enum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


@dataclass(frozen=True, slots=True)
class Change:
    """One object's change: what it was (None: new) and what it is (None: gone)."""

    kind: str
    key: str
    old: Obj | None
    new: Obj | None


def key_of(obj: Obj) -> str:
    """namespace/name, or name for a cluster-scoped object."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    namespace = meta.get("namespace")
    return f"{namespace}/{name}" if namespace else name


def version_of(obj: Obj | None) -> str:
    if obj is None:
        return ""
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class ObjectStore:
    """One kind's objects by key; `generation` grows with every change folded in."""

    def __init__(self, kind: str, *, keep: Callable[[Obj], bool] | None = None) -> None:
        self.kind = kind
        self._keep = keep  # objects outside it are treated as deleted (a label filter's edge)
        self._objects: dict[str, Obj] = {}
        self.generation = 0
        self.synced = False  # a first list has been folded in

    def __len__(self) -> int:
        return len(self._objects)

    def values(self) -> list[Obj]:
        return list(self._objects.values())

    def get(self, key: str) -> Obj | None:
        return self._objects.get(key)

    def apply(self, event: Event, obj: Obj) -> Change | None:
        """Fold one watch event in; the change it made, None when it changed nothing."""
        key = key_of(obj)
        old = self._objects.get(key)
        if event is Event.DELETED or (self._keep is not None and not self._keep(obj)):
            if old is None:
                return None
            del self._objects[key]
            self.generation += 1
            return Change(self.kind, key, old, None)
        if old is not None and version_of(old) == version_of(obj) and version_of(obj):
            return None  # the same version again (a relist's object, a repeated event)
        self._objects[key] = obj
        self.generation += 1
        return Change(self.kind, key, old, obj)

    def replace(self, objects: Iterable[Obj]) -> list[Change]:
        """A full list: the store becomes exactly it; returns what differs from before (objects
        added, changed or gone while no watch was running)."""
        fresh: dict[str, Obj] = {}
        for obj in objects:
            if self._keep is None or self._keep(obj):
                fresh[key_of(obj)] = obj
        changes = []
        for key, obj in fresh.items():
            old = self._objects.get(key)
            if old is None or version_of(old) != version_of(obj) or not version_of(obj):
                changes.append(Change(self.kind, key, old, obj))
        for key, old in self._objects.items():
            if key not in fresh:
                changes.append(Change(self.kind, key, old, None))
        self._objects = fresh
        self.synced = True
        if changes:
            self.generation += 1
        return changes
