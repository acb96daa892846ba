"""The documents of the current snapshot, serialised once per (kind, scope, question): every
page of one person, and every operator's page, share one rendering of a snapshot instead of one
each (on a 1,000-node pool a rendering costs about a second, bench/web_state.py). Only the latest
snapshot's are kept; a new snapshot starts afresh.

A `state` document also keeps its parsed value, which the live stream diffs against the value its
page holds (`delta.diff`); the patch from one version to this one is made once per question and
base version, for every page that holds that base."""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from gpupool.adapters.web.delta import diff

MAX_KEPT = 256  # documents of one snapshot (distinct people and pages); the oldest go first


@dataclass(frozen=True, slots=True)
class Doc:
    version: int  # the snapshot's
    body: bytes  # the JSON sent
    value: dict[str, Any] | None  # the same, parsed: kept where a stream diffs it, else None


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


class Rendered:
    def __init__(self) -> None:
        self._version = -1
        self._docs: dict[Hashable, Doc] = {}
        self._patches: dict[tuple[Hashable, int], bytes | None] = {}

    def _now_at(self, version: int) -> bool:
        """Whether `version` is the kept snapshot's (a newer one drops what was kept)."""
        if version > self._version:
            self._version, self._docs, self._patches = version, {}, {}
        return version == self._version

    def get(
        self,
        version: int,
        key: Hashable,
        make: Callable[[], dict[str, Any]],
        *,
        keep_value: bool = False,
    ) -> Doc:
        if not self._now_at(version):  # a page still on an older snapshot: serve it, keep nothing
            value = make()
            return Doc(version, dumps(value), value if keep_value else None)
        doc = self._docs.get(key)
        if doc is None or (keep_value and doc.value is None):
            value = make()
            doc = Doc(version, dumps(value), value if keep_value else None)
            if len(self._docs) >= MAX_KEPT:
                del self._docs[next(iter(self._docs))]
            self._docs[key] = doc
        return doc

    def patch(self, key: Hashable, base: Doc, doc: Doc) -> bytes | None:
        """The `patch` event's data that turns `base` into `doc` (both the `key` document, with
        their values): `{"base": version, "version": version, "ops": [...]}`; None when it would
        not be smaller than `doc` itself."""
        assert base.value is not None and doc.value is not None
        if not self._now_at(doc.version):
            return _patch(base, doc)
        cache = (key, base.version)
        if cache not in self._patches:
            if len(self._patches) >= MAX_KEPT:
                del self._patches[next(iter(self._patches))]
            self._patches[cache] = _patch(base, doc)
        return self._patches[cache]


def _patch(base: Doc, doc: Doc) -> bytes | None:
    assert base.value is not None and doc.value is not None
    ops = diff(base.value, doc.value)
    data = dumps({"base": base.version, "version": doc.version, "ops": ops})
    return data if len(data) < len(doc.body) else None
