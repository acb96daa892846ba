"""The `gpupool.io/reclaim-notice` annotation (JSON `{at, evictAt, claimant, for[, room,
blocked]}`) ⇄ the typed `state.notice.ReclaimNotice`."""

from __future__ import annotations

import json
from typing import Any

from gpupool.adapters.wire.times import format_time, parse_time
from gpupool.state.notice import ReclaimNotice


def notice_annotation(notice: ReclaimNotice) -> str:
    data: dict[str, Any] = {
        "at": format_time(notice.at),
        "evictAt": format_time(notice.evict_at),
        "claimant": notice.claimant,
        "for": notice.claimant_pod,
    }
    if notice.room:
        data["room"] = notice.room
    if notice.blocked:
        data["blocked"] = notice.blocked
    return json.dumps(data, separators=(",", ":"))


def parse_notice(text: str | None) -> ReclaimNotice | None:
    """The notice, or None when there is none or it cannot be read."""
    if not text:
        return None
    try:
        data = json.loads(text)
        at = parse_time(data.get("at"))
        evict_at = parse_time(data.get("evictAt"))
        if at is None or evict_at is None:
            return None
        blocked = data.get("blocked")
        room = data.get("room")
        return ReclaimNotice(
            at=at,
            evict_at=evict_at,
            claimant=str(data.get("claimant") or ""),
            claimant_pod=str(data.get("for") or ""),
            blocked=str(blocked) if blocked else None,
            room=str(room) if room else None,
        )
    except (ValueError, TypeError, AttributeError):
        return None
