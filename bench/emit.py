"""The common tail of the benchmarks: print the result as JSON and, with `--out`, write it to a
file too. Scripts import it as `from emit import emit` (bench/ is on the path when one runs)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path


def emit(
    result: object,
    out: Path | None,
    *,
    indent: int | None = 2,
    say: Callable[[str], None] = print,
) -> str:
    """Print the result as JSON and, with `out`, write it there too (its folder made); returns the
    text."""
    text = json.dumps(result, indent=indent)
    say(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
    return text
