"""The autoscaler's annotations on a Deployment or StatefulSet ⇄ the core's `ScalePolicy`, and
the controller's own `gpupool.io/autoscale-status` (JSON `{last: {at, from, to}, reported}`)
⇄ `state.workload.AutoscaleRecord`.

A setting that does not parse raises the typed error of its kind with the annotation's name
and what it takes, so the event on the object tells its owner what to fix. The webhook never
sees a Deployment, so these readers are where a tenant's number meets its bound: replicas at
most `bounds.MAX_REPLICAS`, a cooldown at most `bounds.MAX_DURATION_S`, no setting longer than
`bounds.MAX_SETTING_CHARS` (a value beyond is bad input, reported once as a Warning event on the
object, and nothing is scaled).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from gpupool.adapters.wire import names
from gpupool.adapters.wire.times import format_time, parse_time
from gpupool.domain.bounds import (
    MAX_DURATION_S,
    MAX_DURATION_TEXT,
    MAX_REPLICAS,
    MAX_SETTING_CHARS,
)
from gpupool.placement.autoscale import (
    COOLDOWN_S,
    DOWN_PCT,
    UP_PCT,
    InvalidAutoscaleBounds,
    InvalidAutoscaleSetting,
    InvalidAutoscaleThreshold,
    LastStep,
    ScalePolicy,
)
from gpupool.state.workload import AutoscaleRecord

_PART = re.compile(r"(\d+(?:\.\d+)?)(h|m|s)")
_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0}


def autoscaled(annotations: Mapping[str, str]) -> bool:
    """The object asks to be autoscaled (any value of gpupool.io/autoscale but "false": a value
    that is not "true" is then reported as bad input, not silently ignored)."""
    value = annotations.get(names.ANN_AUTOSCALE)
    return value is not None and value.strip().lower() != "false"


def _setting(annotations: Mapping[str, str], name: str) -> str | None:
    """The annotation's text; a value longer than any setting is refused before it is read."""
    text = annotations.get(name)
    if text is not None and len(str(text)) > MAX_SETTING_CHARS:
        raise InvalidAutoscaleSetting(
            f"annotation {name} is {len(str(text))} characters long; a setting has at most "
            f"{MAX_SETTING_CHARS}"
        )
    return None if text is None else str(text)


def _replicas(annotations: Mapping[str, str], name: str, default: int | None) -> int:
    text = _setting(annotations, name)
    if text is None:
        if default is None:
            raise InvalidAutoscaleBounds(
                f"annotation {name} is required: the most replicas the autoscaler may set, "
                f'such as "8"'
            )
        return default
    value = text.strip()
    if not re.fullmatch(r"[+-]?[0-9]+", value):
        raise InvalidAutoscaleBounds(
            f"annotation {name} must be a whole number of replicas; got {text!r}"
        )
    replicas = int(value)
    if replicas > MAX_REPLICAS:
        raise InvalidAutoscaleBounds(
            f"annotation {name} is {text!r}, above the most replicas gpupool autoscales "
            f"({MAX_REPLICAS:,}, a cluster maximum); write at most {MAX_REPLICAS}"
        )
    return replicas


def _percent(annotations: Mapping[str, str], name: str, default: float) -> float:
    text = _setting(annotations, name)
    if text is None:
        return default
    try:
        value = float(text.strip().removesuffix("%"))
    except ValueError:
        raise InvalidAutoscaleThreshold(
            f'annotation {name} must be a percentage from 0 to 100 such as "80"; got {text!r}'
        ) from None
    if not 0.0 <= value <= 100.0:
        raise InvalidAutoscaleThreshold(
            f"annotation {name} must be a percentage from 0 to 100; got {text!r}"
        )
    return value


def _duration(annotations: Mapping[str, str], name: str, default: float) -> float:
    text = _setting(annotations, name)
    if text is None:
        return default
    value = text.strip()
    parts = _PART.findall(value)
    if not parts or "".join(n + u for n, u in parts) != value:
        raise InvalidAutoscaleSetting(
            f"annotation {name} must be a duration such as 5m, 90s or 1h30m; got {text!r}"
        )
    seconds = sum(float(n) * _SECONDS[unit] for n, unit in parts)
    if seconds > MAX_DURATION_S:
        raise InvalidAutoscaleSetting(
            f"annotation {name} is {text!r}, longer than gpupool accepts ({MAX_DURATION_TEXT}, "
            f"366 days); write a duration such as 5m"
        )
    return seconds


def read_policy(annotations: Mapping[str, str]) -> ScalePolicy:
    """The policy the annotations ask for; the typed error of the first thing wrong."""
    switch = (_setting(annotations, names.ANN_AUTOSCALE) or "").strip().lower()
    if switch != "true":
        raise InvalidAutoscaleSetting(
            f'annotation {names.ANN_AUTOSCALE} must be "true" (or "false" to stop); '
            f"got {annotations.get(names.ANN_AUTOSCALE)!r}"
        )
    minimum = _replicas(annotations, names.ANN_AUTOSCALE_MIN, 1)
    maximum = _replicas(annotations, names.ANN_AUTOSCALE_MAX, None)
    if not 1 <= minimum <= maximum:
        raise InvalidAutoscaleBounds(
            f"annotations {names.ANN_AUTOSCALE_MIN} ({minimum}) and {names.ANN_AUTOSCALE_MAX} "
            f"({maximum}) must satisfy 1 <= min <= max"
        )
    up = _percent(annotations, names.ANN_AUTOSCALE_UP, UP_PCT)
    down = _percent(annotations, names.ANN_AUTOSCALE_DOWN, DOWN_PCT)
    if not down < up:
        raise InvalidAutoscaleThreshold(
            f"annotation {names.ANN_AUTOSCALE_DOWN} ({down:g}) must be below "
            f"{names.ANN_AUTOSCALE_UP} ({up:g})"
        )
    cooldown = _duration(annotations, names.ANN_AUTOSCALE_COOLDOWN, COOLDOWN_S)
    return ScalePolicy(
        max_replicas=maximum, min_replicas=minimum, up_pct=up, down_pct=down, cooldown_s=cooldown
    )


def record_annotation(record: AutoscaleRecord) -> str:
    data: dict[str, Any] = {}
    if record.last is not None:
        data["last"] = {
            "at": format_time(record.last.at),
            "from": record.last.from_replicas,
            "to": record.last.to_replicas,
        }
    if record.reported:
        data["reported"] = record.reported
    return json.dumps(data, separators=(",", ":"))


def _replica_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_REPLICAS


def parse_record(text: str | None) -> AutoscaleRecord:
    """What the controller last wrote; an empty record when there is none or it cannot be read
    (only the controller writes it, but the object's owner can edit it: an unreadable one, or a
    step of more replicas than `MAX_REPLICAS`, is treated as no step yet)."""
    if not text:
        return AutoscaleRecord()
    try:
        data = json.loads(text)
        last: LastStep | None = None
        step = data.get("last")
        if isinstance(step, Mapping):
            at = parse_time(step.get("at"))
            moved = (step["from"], step["to"])
            if at is not None and all(_replica_count(n) for n in moved):
                last = LastStep(at, int(moved[0]), int(moved[1]))
        reported = data.get("reported")
        return AutoscaleRecord(last, str(reported) if reported else None)
    except (ValueError, TypeError, AttributeError, KeyError):
        return AutoscaleRecord()
