"""One kind's objects decoded, kept beside its watch-cache store and brought up to date from the
keys the store says changed (`ObjectStore.changes_since`): a round after one pod changed decodes
that pod and rebuilds the Listed's tuples, instead of visiting every pod's metadata and the
decoders' memo (`decoded.listed`); at 7,500 pods that visit was a third of an admission round.

A store that cannot say what changed (a relist since, or more changes than it keeps) is decoded
afresh. The Listed keeps the store's order: a changed object keeps its place, a new one comes
last, as in the store's own dict.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar, cast

from gpupool.state.listed import Listed, ObjectReference, Unreadable
from gpupool.state.objects import Obj, ObjectStore
from gpupool.state.status_writes import StoredStatus

T = TypeVar("T")

Json = dict[str, Any]  # as the API server sent it (the store's objects are never modified)
# what one object decodes to: its value and reference (and stored status), or why it did not
Entry = tuple[tuple[T, ObjectReference], StoredStatus | None] | Unreadable


class DecodedKind(Generic[T]):
    """The decoded objects of one store, as of the store generation last read."""

    def __init__(self, decode: Callable[[Iterable[Json]], Listed[T]]) -> None:
        self._decode = decode
        self._entries: dict[str, Entry[T]] = {}  # store key -> what its object decoded to
        self._generation: int | None = None
        self._listed: Listed[T] = Listed()

    def listed(self, store: ObjectStore) -> Listed[T]:
        """The store's objects decoded, as it holds them now."""
        if self._generation == store.generation:
            return self._listed
        changed = None if self._generation is None else store.changes_since(self._generation)
        if changed is None:
            self._entries = {key: self._one(obj) for key, obj in store.items()}
        else:
            for key in changed:
                obj = store.get(key)
                if obj is None:
                    self._entries.pop(key, None)
                else:
                    self._entries[key] = self._one(obj)
        self._generation = store.generation
        self._listed = self._built()
        return self._listed

    def _one(self, obj: Obj) -> Entry[T]:
        got = self._decode((cast(Json, obj),))
        if got.unreadable:
            return got.unreadable[0]
        pair = got.read[0]
        return pair, got.stored.get(pair[1].key)

    def _built(self) -> Listed[T]:
        read: list[tuple[T, ObjectReference]] = []
        bad: list[Unreadable] = []
        stored: dict[str, StoredStatus] = {}
        for entry in self._entries.values():
            if isinstance(entry, Unreadable):
                bad.append(entry)
                continue
            pair, status = entry
            read.append(pair)
            if status is not None:
                stored[pair[1].key] = status
        return Listed(tuple(read), tuple(bad), stored)
