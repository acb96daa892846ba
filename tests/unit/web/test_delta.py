"""The web view's document diff (adapters/web/delta.py): applying the diff of two documents to the
first gives the second, over generated documents (hypothesis) and over the views' own pool
document with one pod placed; the pool change is a handful of operations, not a new document.
The page's own `applyPatch` (static/app.js) is run under Node.js on the same documents, where
Node is installed."""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "views"))

from pool_fixture import NOW, lease, small_pool

from gpupool.adapters import views_json
from gpupool.adapters.web.delta import PatchFailed, apply, diff, pointer
from gpupool.state.views.status import build_status

# No 0 or 1 beside the booleans: Python's == says True == 1, and a subtree compared with == would
# hide that flip; the views' documents are typed (a place holds booleans or numbers, never both).
numbers = st.integers(-5, 5) | st.floats(allow_nan=False, allow_infinity=False)  # JSON's
scalars = (
    st.none()
    | st.booleans()
    | numbers.filter(lambda x: x not in (0, 1))
    | st.text("ab/~", max_size=3)
)
keys = st.text("abc/~", max_size=3)


def _rows(children: st.SearchStrategy[Any]) -> st.SearchStrategy[list[dict[str, Any]]]:
    """Arrays of objects with a distinct `name` (matched by identity) or a repeated one."""
    row = st.fixed_dictionaries({"name": st.sampled_from("pqrstu")}, optional={"v": children})
    return st.lists(row, max_size=6)


documents = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(keys, children, max_size=4)
        | _rows(children)
        | _rows(children).map(lambda xs: list({x["name"]: x for x in xs}.values()))
    ),
    max_leaves=30,
)


def _strict(x: Any) -> Any:
    """`x` with each boolean told apart from a number (Python's == says True == 1; JSON does not),
    and integers and floats alike (one JSON number)."""
    if isinstance(x, bool):
        return ("bool", x)
    if isinstance(x, int | float):
        return ("number", float(x))
    if isinstance(x, dict):
        return {k: _strict(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_strict(v) for v in x]
    return x


@settings(max_examples=400, deadline=None)
@given(documents, documents)
def test_applying_the_diff_gives_the_new_document(a: Any, b: Any) -> None:
    before = copy.deepcopy(a)
    ops = diff(a, b)
    assert _strict(apply(a, ops)) == _strict(b)
    assert a == before  # neither diff nor apply changed the old document
    json.dumps(ops)  # the operations are plain JSON
    assert (ops == []) == (_strict(a) == _strict(b))


@settings(max_examples=200, deadline=None)
@given(documents, st.data())
def test_a_small_change_to_a_document_diffs_small(a: Any, data: st.DataObject) -> None:
    b = copy.deepcopy(a)
    paths = _paths(b, [])
    path = data.draw(st.sampled_from(paths))
    _put(b, path, "changed!")
    ops = diff(a, b)
    assert _strict(apply(a, ops)) == _strict(b)
    assert len(ops) <= 1


def _paths(x: Any, at: list[Any]) -> list[list[Any]]:
    out = [at]
    if isinstance(x, dict):
        for k, v in x.items():
            out += _paths(v, [*at, k])
    elif isinstance(x, list):
        for i, v in enumerate(x):
            out += _paths(v, [*at, i])
    return out


def _put(doc: Any, path: list[Any], value: Any) -> None:
    if not path:
        return
    for part in path[:-1]:
        doc = doc[part]
    doc[path[-1]] = value


def _state(pool_leases: list[Any]) -> dict[str, Any]:
    view = build_status(dataclasses.replace(small_pool(), leases=pool_leases), NOW)
    return json.loads(
        json.dumps(
            {
                "status": views_json.status_doc(view, None, None),
                "queue": views_json.queue_doc(view, None),
                "leases": views_json.leases_doc(view, None),
            }
        )
    )


def test_a_pod_placed_is_its_slice_its_lease_row_and_the_figures_it_moves() -> None:
    leases = list(small_pool().leases)
    before = _state(leases)
    placed = lease("team-b", "late", "gpu-node-c", [(3, 0, 20)], age_s=0.0)
    after = _state([*leases, placed])
    ops = diff(before, after)
    assert apply(before, ops) == after
    paths = [op["path"] for op in ops]
    adds = [op for op in ops if op["op"] == "add"]
    # the slice on its card and the lease row are inserted, not the arrays after them replaced
    assert any(op["path"].startswith("/status/nodes/") and "/slices/" in op["path"] for op in adds)
    assert any(op["path"].startswith("/leases/live/") for op in adds)
    assert not any(p in ("/status/nodes", "/leases/live") for p in paths), paths
    assert len(json.dumps(ops)) < len(json.dumps(after)) / 4


def test_rows_matched_by_identity_are_removed_and_inserted_in_place() -> None:
    a = {"rows": [{"name": n, "v": 1} for n in "abcde"]}
    b = {"rows": [{"name": n, "v": 2 if n == "d" else 1} for n in "xabde"]}
    ops = diff(a, b)
    assert ops == [
        {"op": "add", "path": "/rows/0", "value": {"name": "x", "v": 1}},
        {"op": "remove", "path": "/rows/3"},
        {"op": "replace", "path": "/rows/3/v", "value": 2},
    ]
    swapped = {"rows": [{"name": n, "v": 1} for n in "abyde"]}  # c gave its place to y
    assert diff(a, swapped) == [
        {"op": "replace", "path": "/rows/2", "value": {"name": "y", "v": 1}}
    ]
    assert apply(a, ops) == b


def test_a_boolean_is_not_the_number_one_and_an_integer_is_its_float() -> None:
    changed = diff({"x": 1, "y": 0}, {"x": True, "y": 2})
    assert changed[0] == {"op": "replace", "path": "/x", "value": True}
    assert diff({"x": 1}, {"x": 1.0}) == []


def test_pointers_escape_tilde_and_slash() -> None:
    assert pointer(["a/b", "c~d", 3]) == "/a~1b/c~0d/3"
    a = {"a/b": {"c~d": [0, 1, 2, 3]}}
    assert apply(a, diff(a, {"a/b": {"c~d": [0, 1, 2, 4]}})) == {"a/b": {"c~d": [0, 1, 2, 4]}}


@pytest.mark.parametrize(
    ("op", "message"),
    [
        ({"op": "move", "path": "/a"}, "not an operation"),
        ({"op": "replace", "path": "/nope/x", "value": 1}, "no member 'nope'"),
        ({"op": "remove", "path": "/list/7"}, "not an index in an array of 2"),
        ({"op": "replace", "path": "/a/b", "value": 1}, "leads into a int"),
        ({"op": "remove", "path": ""}, "cannot remove the whole document"),
    ],
)
def test_a_patch_that_does_not_fit_says_where(op: dict[str, Any], message: str) -> None:
    with pytest.raises(PatchFailed, match=message):
        apply({"a": 1, "list": [1, 2]}, [op])


APP_JS = Path(__file__).resolve().parents[3] / "src/gpupool/adapters/web/static/app.js"
NODE_MAIN = """
const cases = JSON.parse(require("fs").readFileSync(0, "utf8"));
process.stdout.write(JSON.stringify(cases.map(([doc, ops]) => {
  try { return { doc: applyPatch(doc, ops) }; } catch (err) { return { failed: err.message }; }
})));
"""


def _page_apply(cases: list[tuple[Any, list[Any]]]) -> list[Any]:
    """Each (document, operations) applied by the page's `applyPatch`, under Node.js."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("no node on PATH: the page's applyPatch is checked in the browser e2e only")
    source = APP_JS.read_text()
    start = source.index("class PatchFailed")
    end = source.index("\n}\n", source.index("function applyPatch")) + 3
    out = subprocess.run(
        [node, "-e", source[start:end] + NODE_MAIN],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return [json.loads(json.dumps(r)) for r in json.loads(out.stdout)]


@settings(max_examples=3, deadline=None)
@given(st.lists(st.tuples(documents, documents), min_size=60, max_size=60))
def test_the_page_applies_a_patch_as_the_server_does(pairs: list[tuple[Any, Any]]) -> None:
    results = _page_apply([(a, diff(a, b)) for a, b in pairs])
    for (_, b), got in zip(pairs, results, strict=True):
        assert "doc" in got, got
        assert _strict(got["doc"]) == _strict(b)


def test_the_page_refuses_a_patch_that_does_not_fit() -> None:
    bad = [{"op": "replace", "path": "/nope/x", "value": 1}]
    (got,) = _page_apply([({"a": 1}, bad)])
    assert "no /nope/x" in got["failed"]
