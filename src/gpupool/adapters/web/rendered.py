"""The documents of the current snapshot, serialised once per (kind, scope, question): every
page of one person, and every operator's page, share one rendering of a snapshot instead of one
each (on a 1,000-node pool a rendering costs about a second, bench/web_state.py). Only the latest
snapshot's are kept; a new snapshot starts afresh."""

from __future__ import annotations

from collections.abc import Callable, Hashable

MAX_KEPT = 256  # documents of one snapshot (distinct people and pages); the oldest go first


class Rendered:
    def __init__(self) -> None:
        self._version = -1
        self._docs: dict[Hashable, bytes] = {}

    def get(self, version: int, key: Hashable, make: Callable[[], bytes]) -> bytes:
        if version != self._version:
            if version < self._version:
                return make()  # a page still on an older snapshot: serve it, keep nothing
            self._version, self._docs = version, {}
        doc = self._docs.get(key)
        if doc is None:
            doc = make()
            if len(self._docs) >= MAX_KEPT:
                del self._docs[next(iter(self._docs))]
            self._docs[key] = doc
        return doc
