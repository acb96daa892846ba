"""The compute-modes ConfigMap (`gpupool-compute-modes` in the release namespace), decoded once
into `domain.compute_modes.ComputeModes`. Schema (docs/compute-modes.md):

    data:
      inference: "mps: true, activeThreadPercentage: 50"   # any model
      training: "mps: false"
      A100-80GB.inference: "{mps: true, activeThreadPercentage: 30}"

A key is a pod class (`inference`, `training`), optionally after a card model of the catalogue
and a dot. A value is a YAML mapping (braces optional) with `mps` (true/false, required) and
`activeThreadPercentage` (1-100, only with `mps: true`), on one line or as a YAML block.
Anything else raises `InvalidComputeModes` naming the key: the whole ConfigMap is refused, never
half-applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from gpupool.domain.compute_modes import (
    ComputeModes,
    InvalidComputeModes,
    ModeDefault,
    WorkloadClass,
)
from gpupool.domain.errors import GpupoolError
from gpupool.domain.models import get_model

FIELDS = ("mps", "activeThreadPercentage")
EXAMPLE = "mps: true, activeThreadPercentage: 50"


def _value(key: str, text: object) -> ModeDefault:
    if not isinstance(text, str):
        raise InvalidComputeModes(key, f"the value must be a string such as {EXAMPLE!r}")
    body = text.strip()
    if "\n" not in body and not body.startswith("{"):  # one line: a flow mapping, braces optional
        body = "{" + body + "}"
    try:
        raw: Any = yaml.safe_load(body)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem", None) or "not YAML"
        raise InvalidComputeModes(
            key, f"{text!r} is not a mapping such as {EXAMPLE!r} ({mark})"
        ) from None
    if not isinstance(raw, Mapping):
        raise InvalidComputeModes(key, f"{text!r} is not a mapping such as {EXAMPLE!r}")
    unknown = sorted(str(k) for k in raw if k not in FIELDS)
    if unknown:
        raise InvalidComputeModes(
            key, f"unknown field(s) {', '.join(unknown)}; the fields are {', '.join(FIELDS)}"
        )
    mps = raw.get("mps")
    if not isinstance(mps, bool):
        raise InvalidComputeModes(key, f"mps must be true or false; got {mps!r}")
    pct = raw.get("activeThreadPercentage")
    if pct is None:
        return ModeDefault(mps)
    if isinstance(pct, bool) or not isinstance(pct, int) or not 1 <= pct <= 100:
        raise InvalidComputeModes(
            key, f"activeThreadPercentage must be a whole number from 1 to 100; got {pct!r}"
        )
    if not mps:
        raise InvalidComputeModes(key, "activeThreadPercentage is set but mps is false")
    return ModeDefault(mps, pct)


def _key(key: str) -> tuple[str | None, WorkloadClass]:
    model, dot, name = key.rpartition(".")
    try:
        workload = WorkloadClass.parse(name)
    except GpupoolError:
        raise InvalidComputeModes(
            key,
            "a key is a pod class (inference, training), or a GPU model, a dot and a class "
            "(A100-80GB.inference)",
        ) from None
    if not dot:
        return None, workload
    try:
        return get_model(model).name, workload
    except GpupoolError as err:
        raise InvalidComputeModes(key, str(err)) from None


def read_compute_modes(data: Mapping[str, object] | None) -> ComputeModes:
    """The ConfigMap's `data` (None or empty: no defaults, no MPS unless a pod asks)."""
    by_model: dict[tuple[str, WorkloadClass], ModeDefault] = {}
    by_class: dict[WorkloadClass, ModeDefault] = {}
    for key in sorted(data or {}):
        model, workload = _key(key)
        value = _value(key, (data or {})[key])
        if (model is None and workload in by_class) or (model, workload) in by_model:
            raise InvalidComputeModes(key, f"{model or 'any model'}, {workload.value}: set twice")
        if model is None:
            by_class[workload] = value
        else:
            by_model[(model, workload)] = value
    return ComputeModes(by_model, by_class)


def describe(modes: ComputeModes) -> str:
    """The settings in words (the event and log line say which are kept)."""

    def one(d: ModeDefault) -> str:
        if not d.mps:
            return "no MPS"
        return "MPS" + (f" {d.percentage}%" if d.percentage else "")

    parts = [f"{w.value}: {one(d)}" for w, d in modes.by_class.items()]
    parts += [f"{m}.{w.value}: {one(d)}" for (m, w), d in modes.by_model.items()]
    return "; ".join(parts) if parts else "none (no MPS unless a pod asks)"
