"""The per-snapshot documents and patches (adapters/web/rendered.py): one rendering and one patch
per question and base, the whole document instead of a patch that would not be smaller, and
nothing kept from an older snapshot."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "views"))

from pool_fixture import NOW, small_pool

from gpupool.adapters import views_json
from gpupool.adapters.web.delta import apply
from gpupool.adapters.web.rendered import Rendered, dumps
from gpupool.adapters.web.server import state_doc
from gpupool.state.views.scope import Scope
from gpupool.state.views.status import build_status


def _maker(doc: dict[str, Any], calls: list[int]) -> Any:
    def make() -> dict[str, Any]:
        calls.append(1)
        return doc

    return make


def test_a_document_and_a_patch_are_made_once_per_question_and_base() -> None:
    rendered, calls = Rendered(), []
    rows = [{"name": f"n{i}", "free": i} for i in range(50)]
    old = rendered.get(1, "k", _maker({"rows": rows}, calls), keep_value=True)
    assert rendered.get(1, "k", _maker({"rows": []}, calls), keep_value=True) is old
    assert calls == [1] and old.value is not None and json.loads(old.body) == old.value
    changed = [dict(r, free=99) if r["name"] == "n7" else r for r in rows]
    new = rendered.get(2, "k", _maker({"rows": changed}, calls), keep_value=True)
    patch = rendered.patch("k", old, new)
    assert patch is not None and rendered.patch("k", old, new) is patch  # kept for the next page
    event = json.loads(patch)
    assert (event["base"], event["version"]) == (1, 2)
    assert event["ops"] == [{"op": "replace", "path": "/rows/7/free", "value": 99}]
    assert apply(old.value, event["ops"]) == new.value


def test_a_patch_not_smaller_than_the_document_is_not_made() -> None:
    rendered = Rendered()
    old = rendered.get(1, "k", lambda: {"a": 1, "b": 2}, keep_value=True)
    new = rendered.get(2, "k", lambda: {"c": 3}, keep_value=True)  # every member changed
    assert rendered.patch("k", old, new) is None  # the stream sends the whole state


def test_only_the_latest_snapshot_is_kept() -> None:
    rendered, calls = Rendered(), []
    rendered.get(2, "k", _maker({"v": 2}, calls))
    older = rendered.get(1, "k", _maker({"v": 1}, calls))  # a page still on snapshot 1
    assert json.loads(older.body) == {"v": 1} and older.value is None
    assert rendered.get(2, "k", _maker({"v": 0}, calls)).body == b'{"v":2}'
    assert len(calls) == 2


def test_kept_nodes_are_written_from_their_text_byte_for_byte() -> None:
    view = build_status(small_pool(), NOW)
    doc = state_doc(view, Scope.operator("op"), None, None)
    doc["status"]["notes"] = ['a "quoted" note \\ with ünïcode and \x00 in it']
    nodes = doc["status"]["nodes"]
    assert all(views_json.kept_text(n) is not None for n in nodes)  # the memo holds them
    patch = {"ops": [{"op": "replace", "path": "/status/nodes/1", "value": nodes[1]}]}
    for value in (doc, patch, nodes, {"nothing": "kept"}, [doc, doc]):
        assert dumps(value) == json.dumps(value, separators=(",", ":")).encode()
