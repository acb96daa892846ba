"""The documents of the current snapshot, serialised once per (kind, scope, question): every
page of one person, and every operator's page, share one rendering of a snapshot instead of one
each (on a 1,000-node pool a rendering costs about a second, bench/web_state.py). Only the latest
snapshot's are kept; a new snapshot starts afresh.

A `state` document also keeps its parsed value, which the live stream diffs against the value its
page holds (`delta.diff`); the patch from one version to this one is made once per question and
base version, for every page that holds that base."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from gpupool.adapters import views_json
from gpupool.adapters.web.delta import diff

MAX_KEPT = 256  # documents of one snapshot (distinct people and pages); the oldest go first


@dataclass(frozen=True, slots=True)
class Doc:
    version: int  # the snapshot's
    body: bytes  # the JSON sent
    value: dict[str, Any] | None  # the same, parsed: kept where a stream diffs it, else None


# Stands in for a kept node's JSON while the rest of a document is serialised (a random token:
# no value of the cluster's can spell it), then is replaced by that JSON, made once per node view.
_SLOT = f"\x00gpupool-node-{uuid.uuid4().hex}\x00"
_SLOT_TEXT = json.dumps(_SLOT).encode()


def dumps(value: Any) -> bytes:
    """`json.dumps(value, separators=(",", ":"))`, byte for byte, with each node's JSON that
    `views_json` keeps written from its text instead of serialised again (at 1,213 nodes the
    nodes are nearly all of a pool document: one render re-serialises only the changed ones)."""
    texts: list[bytes] = []

    def swap(x: Any) -> Any:
        if isinstance(x, dict):
            text = views_json.kept_text(x)
            if text is not None:
                texts.append(text)
                return _SLOT
            return {k: swap(v) for k, v in x.items()}
        if isinstance(x, list):
            return [swap(v) for v in x]
        return x

    body = json.dumps(swap(value), separators=(",", ":")).encode()
    if not texts:
        return body
    pieces = body.split(_SLOT_TEXT)
    assert len(pieces) == len(texts) + 1
    out = [pieces[0]]
    for text, piece in zip(texts, pieces[1:], strict=True):
        out += (text, piece)
    return b"".join(out)


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
