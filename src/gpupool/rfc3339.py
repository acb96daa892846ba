"""RFC 3339 times as gpupool writes them on objects (microseconds, UTC, `Z`) and reads them back
as epoch seconds; pure."""

from __future__ import annotations

import datetime as dt


def parse_time(text: object) -> float | None:
    """Epoch seconds of an RFC 3339 time (`2026-01-02T03:04:05.123456Z`); None if absent/bad."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.timestamp()


def format_time(epoch: float) -> str:
    """RFC 3339 with microseconds, UTC."""
    moment = dt.datetime.fromtimestamp(epoch, dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
