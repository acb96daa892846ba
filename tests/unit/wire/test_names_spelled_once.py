"""Every `gpupool.io` name is spelled in `adapters/wire/names.py` and nowhere else in `src/`.

The rule, checked over the syntax tree of every module under `src/gpupool`:

- A string literal that *is* a name is allowed only in `adapters/wire/names.py`. A literal is a
  name when its text (or a constant piece of an f-string), stripped, is one word that contains
  `gpupool.io`: an annotation, label, resource, gate, finalizer or webhook name, the API group or
  version, an API path (`/apis/gpupool.io/v1alpha1/...`) or a selector. Such code imports the
  constant from `names` (or builds the path from `names.GROUP` / `names.API_VERSION`).
- Docstrings and comments may mention names: they describe, they are not read or written.
- Prose in a string literal (a message or a help text: text with a space in it) may mention a
  name too: the pure core (`domain`, `placement`, `quota`, `state`) may not import adapters, and
  its messages still tell the user which name to fix.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src" / "gpupool"
NAMES = SRC / "adapters" / "wire" / "names.py"


def _docstrings(tree: ast.Module) -> set[int]:
    """The ids of the docstring constants of the module, its classes and functions."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def spelled_names(source: str) -> list[tuple[int, str]]:
    """The (line, text) of each string literal in `source` that spells a gpupool.io name."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
            continue
        text = node.value.strip()
        if id(node) in docstrings or "gpupool.io" not in text or len(text.split()) != 1:
            continue
        found.append((node.lineno, text))
    return sorted(found)


def test_the_rule_tells_names_from_mentions() -> None:
    source = (
        '"""Reads `gpupool.io/queue`."""\n'
        "# the gpupool.io/queue note\n"
        'A = "gpupool.io/queue"\n'
        'B = f"/apis/gpupool.io/v1alpha1/{x}"\n'
        'C = f"ask for gpupool.io/gpu-memory instead, {who}"\n'
        "def f() -> None:\n"
        '    """Writes gpupool.io/admitted."""\n'
    )
    assert spelled_names(source) == [(3, "gpupool.io/queue"), (4, "/apis/gpupool.io/v1alpha1/")]


def test_every_gpupool_io_name_is_spelled_in_names_py_only() -> None:
    offenders = [
        f"{path.relative_to(SRC.parent)}:{line}: {text!r}"
        for path in sorted(SRC.rglob("*.py"))
        if path != NAMES
        for line, text in spelled_names(path.read_text())
    ]
    assert not offenders, (
        "spell these gpupool.io names in adapters/wire/names.py and import them from there:\n"
        + "\n".join(offenders)
    )


def test_names_py_still_spells_the_names() -> None:
    assert spelled_names(NAMES.read_text())
