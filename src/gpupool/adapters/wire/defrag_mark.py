"""The GpuNode annotation `gpupool.io/defrag` (JSON `{"pool", "since", "until", "gpus": [index,
...]}`) ⇄ the typed `state.nodes.DefragMark`: the cards of the node a defragmentation round is
clearing, which take no new slices until the controller removes the mark."""

from __future__ import annotations

import json
from typing import Any

from gpupool.adapters.wire.times import format_time, parse_time
from gpupool.state.nodes import DefragMark


def mark_annotation(mark: DefragMark) -> str:
    data: dict[str, Any] = {
        "pool": mark.pool,
        "since": format_time(mark.since),
        "until": format_time(mark.until),
        "gpus": list(mark.gpus),
    }
    return json.dumps(data, separators=(",", ":"))


def parse_mark(text: str | None) -> DefragMark | None:
    """The mark, or None when there is none or it cannot be read (an unreadable mark closes
    nothing: the controller rewrites or removes it on its next round)."""
    if not text:
        return None
    try:
        data = json.loads(text)
        since = parse_time(data.get("since"))
        until = parse_time(data.get("until"))
        gpus = data.get("gpus")
        if since is None or until is None or not isinstance(gpus, list):
            return None
        if not all(isinstance(g, int) and not isinstance(g, bool) for g in gpus):
            return None
        return DefragMark(str(data.get("pool") or ""), since, until, tuple(sorted(set(gpus))))
    except (ValueError, TypeError, AttributeError):
        return None
