"""What changed between two JSON documents, as the operations that turn one into the other: the
subset of JSON Patch (RFC 6902) the web view's page applies (static/app.js, `applyPatch`):

    {"op": "replace", "path": "/status/nodes/3/cards/0/freeBytes", "value": 51539607552}
    {"op": "add",     "path": "/leases/live/17", "value": {...}}   # inserted before index 17
    {"op": "remove",  "path": "/queue/items/0"}

Paths are JSON Pointers (RFC 6901: `~` written `~0`, `/` written `~1`); the operations apply in
order, each to the result of the one before, so an index counts the elements as they stand then.

Objects are compared key by key. Arrays of the same length are compared element by element. Arrays
whose elements are objects that each carry a distinct identity (`KEYS`: a lease, a node or tenant
name, a pod, a card index) are matched by it, so a lease row inserted among thousands is one `add`,
not a replacement of the rows after it. Other arrays that changed length are replaced whole.

Equal subtrees are found with Python's `==`, where `1 == 1.0` (one JSON number either way) but also
`True == 1`: a boolean that became 1 inside an otherwise equal object goes unseen. The documents
diffed here are typed (a place holds booleans or numbers, never both), so that does not arise; a
scalar compared on its own is compared with its type.

Pure: no I/O, no clock. Members that compare equal are skipped at C speed (`==`), so a diff costs
about one comparison of the two documents, less than serialising one: 267 ms for two 8 MB pool
documents (1,213 nodes) that differ by one pod placed, on the loaded 2-core development machine
(bench/web_state.py)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from difflib import SequenceMatcher
from typing import Any

Op = dict[str, Any]

KEYS = ("lease", "name", "pod", "index")  # an element's identity in the views' arrays, if unique


class PatchFailed(ValueError):
    """A patch that does not fit the document it was applied to (a path that is not there)."""


def pointer(parts: Sequence[str | int]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def diff(a: Any, b: Any) -> list[Op]:
    """The operations that turn `a` into `b` (none when they are equal)."""
    ops: list[Op] = []
    _diff(a, b, [], ops)
    return ops


def _same(a: Any, b: Any) -> bool:
    return a is b or (type(a) is type(b) and a == b)


def _diff(a: Any, b: Any, path: list[str | int], ops: list[Op]) -> None:
    # Objects and arrays are not compared whole first: their members are, each once (`_same`),
    # and only the ones that differ are walked into.
    if a is b:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        _diff_object(a, b, path, ops)
    elif isinstance(a, list) and isinstance(b, list):
        _diff_array(a, b, path, ops)
    elif not (_same(a, b) or (_number(a) and _number(b) and a == b)):
        ops.append({"op": "replace", "path": pointer(path), "value": b})


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _diff_object(
    a: dict[str, Any], b: dict[str, Any], path: list[str | int], ops: list[Op]
) -> None:
    for key, old in a.items():
        if key not in b:
            ops.append({"op": "remove", "path": pointer([*path, key])})
        else:
            new = b[key]
            if not _same(old, new):
                _diff(old, new, [*path, key], ops)
    for key, new in b.items():
        if key not in a:
            ops.append({"op": "add", "path": pointer([*path, key]), "value": new})


def _diff_array(a: list[Any], b: list[Any], path: list[str | int], ops: list[Op]) -> None:
    keys = _identities(a, b)
    if keys is None:
        if len(a) != len(b):
            ops.append({"op": "replace", "path": pointer(path), "value": b})
            return
        for i, (old, new) in enumerate(zip(a, b, strict=True)):
            if not _same(old, new):
                _diff(old, new, [*path, i], ops)
        return
    old_keys, new_keys = keys
    if old_keys == new_keys:
        for i, (old, new) in enumerate(zip(a, b, strict=True)):
            if not _same(old, new):
                _diff(old, new, [*path, i], ops)
        return
    # Matched by identity: elements kept are diffed in place, the rest replaced, removed or added.
    for tag, i1, i2, j1, j2 in _matches(old_keys, new_keys):
        if tag == "equal":
            for i, j in zip(range(i1, i2), range(j1, j2), strict=True):
                if not _same(a[i], b[j]):
                    _diff(a[i], b[j], [*path, j], ops)
            continue
        # Elements before `j1` are final, so the next old element stands at `j1`: old ones are
        # overwritten by new ones pairwise, then the old left over removed or the new added.
        both = min(i2 - i1, j2 - j1)
        for j in range(j1, j1 + both):
            ops.append({"op": "replace", "path": pointer([*path, j]), "value": b[j]})
        for _ in range(i2 - i1 - both):
            ops.append({"op": "remove", "path": pointer([*path, j1 + both])})
        for j in range(j1 + both, j2):
            ops.append({"op": "add", "path": pointer([*path, j]), "value": b[j]})


def _identities(a: list[Any], b: list[Any]) -> tuple[list[Hashable], list[Hashable]] | None:
    """Each element's identity in `a` and in `b` by the first of `KEYS` that every element of both
    holds with a distinct scalar value; None when there is none (or an element is no object)."""
    sample = a[0] if a else b[0] if b else None
    if not isinstance(sample, dict):
        return None
    for key in KEYS:
        if key not in sample:
            continue
        try:
            ids = [x[key] for x in a], [x[key] for x in b]
            if all(len(set(xs)) == len(xs) for xs in ids):  # an object or array: TypeError
                return ids
        except (KeyError, TypeError):
            pass
    return None


def _matches(old: list[Hashable], new: list[Hashable]) -> list[tuple[str, int, int, int, int]]:
    """`SequenceMatcher`'s opcodes for two lists of identities, with the common head and tail
    (where a change usually leaves most of a long array) matched without it."""
    size = min(len(old), len(new))
    head = 0
    while head < size and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < size - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    out: list[tuple[str, int, int, int, int]] = []
    if head:
        out.append(("equal", 0, head, 0, head))
    middle = SequenceMatcher(None, old[head : len(old) - tail], new[head : len(new) - tail], False)
    for tag, i1, i2, j1, j2 in middle.get_opcodes():
        out.append((tag, i1 + head, i2 + head, j1 + head, j2 + head))
    if tail:
        out.append(("equal", len(old) - tail, len(old), len(new) - tail, len(new)))
    return out


def apply(doc: Any, ops: Sequence[Op]) -> Any:
    """`doc` with `ops` applied, the way the page does it (`doc` itself is left as it was, but the
    parts the operations did not touch are shared with the result)."""
    root: list[Any] = [doc]
    mine: set[int] = set()  # ids of the containers copied here: they are changed in place
    for op in ops:
        _apply_one(root, op, mine)
    return root[0]


def _apply_one(root: list[Any], op: Op, mine: set[int]) -> None:
    kind, path = op.get("op"), op.get("path")
    if kind not in ("add", "remove", "replace") or not isinstance(path, str):
        raise PatchFailed(f"not an operation this patch format has: {op!r}")
    if path == "":
        if kind == "remove":
            raise PatchFailed("cannot remove the whole document")
        root[0] = op["value"]
        return
    if not path.startswith("/"):
        raise PatchFailed(f"a path starts with '/': {path!r}")
    parts = [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]
    # copy on the way down (once per container), so the caller's document stays as it was
    parent = root[0] = _copy(root[0], mine)
    for part in parts[:-1]:
        child = _copy(_child(parent, part, path), mine)
        _set(parent, part, child, path)
        parent = child
    last = parts[-1]
    if isinstance(parent, dict):
        if kind != "add" and last not in parent:
            raise PatchFailed(f"{path!r}: no member {last!r} to {kind}")
        if kind == "remove":
            del parent[last]
        else:
            parent[last] = op["value"]
    elif isinstance(parent, list):
        index = _index(last, len(parent) + (kind == "add"), path)
        if kind == "add":
            parent.insert(index, op["value"])
        elif kind == "remove":
            del parent[index]
        else:
            parent[index] = op["value"]
    else:
        raise PatchFailed(f"{path!r}: leads into a {type(parent).__name__}, not an object or array")


def _copy(x: Any, mine: set[int]) -> Any:
    if id(x) in mine or not isinstance(x, dict | list):
        return x
    copied = dict(x) if isinstance(x, dict) else list(x)
    mine.add(id(copied))
    return copied


def _index(part: str, size: int, path: str) -> int:
    if not part.isdigit() or int(part) >= size:
        raise PatchFailed(f"{path!r}: {part!r} is not an index in an array of {size}")
    return int(part)


def _child(parent: Any, part: str, path: str) -> Any:
    if isinstance(parent, dict):
        if part not in parent:
            raise PatchFailed(f"{path!r}: no member {part!r}")
        return parent[part]
    if isinstance(parent, list):
        return parent[_index(part, len(parent), path)]
    raise PatchFailed(f"{path!r}: leads into a {type(parent).__name__}, not an object or array")


def _set(parent: Any, part: str, value: Any, path: str) -> None:
    if isinstance(parent, dict):
        parent[part] = value
    else:
        parent[_index(part, len(parent), path)] = value
