"""The objects of one kind as the last list and the watch events since have left them: what the
controller and the web view read instead of listing the API server every round.

Pure: no client, no clock. The adapter that feeds it (`adapters.kubernetes.watch_cache`) lists
once, hands each watch event to `apply`, and on a relist (a watch whose version is gone) hands
the whole list to `replace`, which says what changed in between so no change is lost to the
loops that wait on them. Objects are kept as the API server sent them (JSON dicts) and are
never modified here; a reader must not modify them either.
"""

from __future__ import annotations

from collections import deque
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


CHANGE_LOG = 10_000  # the keys of the last changes a store remembers (`changes_since`)


class ObjectStore:
    """One kind's objects by key; `generation` grows with every change folded in, and the keys
    of the last `CHANGE_LOG` changes are kept so that a reader can bring what it made from the
    objects up to date with only those (`changes_since`)."""

    def __init__(self, kind: str, *, keep: Callable[[Obj], bool] | None = None) -> None:
        self.kind = kind
        self._keep = keep  # objects outside it are treated as deleted (a label filter's edge)
        self._objects: dict[str, Obj] = {}
        self.generation = 0
        self.synced = False  # a first list has been folded in
        self._log: deque[tuple[int, str]] = deque()  # (generation, key) of each change
        self._floor = 0  # the oldest generation `changes_since` can answer from

    def __len__(self) -> int:
        return len(self._objects)

    def values(self) -> list[Obj]:
        return list(self._objects.values())

    def items(self) -> list[tuple[str, Obj]]:
        return list(self._objects.items())

    def get(self, key: str) -> Obj | None:
        return self._objects.get(key)

    def changes_since(self, generation: int) -> set[str] | None:
        """The keys of the objects changed (added, modified or deleted) after `generation`;
        None when the store cannot tell (a relist came in since, or more changes than it keeps):
        the reader starts afresh from `values()`."""
        if generation < self._floor or generation > self.generation:
            return None
        keys: set[str] = set()
        for changed_at, key in reversed(self._log):
            if changed_at <= generation:
                break
            keys.add(key)
        return keys

    def _changed(self, key: str) -> None:
        self.generation += 1
        if len(self._log) >= CHANGE_LOG:
            self._floor = self._log.popleft()[0]
        self._log.append((self.generation, key))

    def apply(self, event: Event, obj: Obj) -> Change | None:
        """Fold one watch event in; the change it made, None when it changed nothing."""
        key = key_of(obj)
        old = self._objects.get(key)
        if event is Event.DELETED or (self._keep is not None and not self._keep(obj)):
            if old is None:
                return None
            del self._objects[key]
            self._changed(key)
            return Change(self.kind, key, old, None)
        if old is not None and version_of(old) == version_of(obj) and version_of(obj):
            return None  # the same version again (a relist's object, a repeated event)
        self._objects[key] = obj
        self._changed(key)
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
        if changes:  # one generation for all of them: a reader of an older one starts afresh
            self.generation += 1
            self._log.clear()
            self._floor = self.generation
        return changes
