"""GpuPool JSON → `state.pool_scope.PoolScope` (what its status is computed over). The CRD's
schema rules out most bad values; an object stored before a rule is refused here with
InvalidPoolScope, and the controller reports it instead of writing a status."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpupool.state.pool_scope import DEFAULT_THRESHOLD_PCT, InvalidPoolScope, PoolScope


def read_pool_scope(obj: Mapping[str, Any]) -> PoolScope:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    name = str(meta.get("name") or "")
    generation = meta.get("generation")
    selector = spec.get("nodeSelector") or {}
    if not isinstance(selector, Mapping):
        raise InvalidPoolScope(f"GpuPool {name}: spec.nodeSelector must map labels to values")
    models = spec.get("models") or []
    if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
        raise InvalidPoolScope(f"GpuPool {name}: spec.models must be a list of model names")
    threshold = spec.get("defragThresholdPercent", DEFAULT_THRESHOLD_PCT)
    if isinstance(threshold, bool) or not isinstance(threshold, int) or not 0 <= threshold <= 100:
        raise InvalidPoolScope(
            f"GpuPool {name}: spec.defragThresholdPercent is a percentage of a card's memory "
            f"from 0 to 100; got {threshold!r}"
        )
    return PoolScope(
        name=name,
        generation=generation if isinstance(generation, int) else 0,
        node_selector=tuple(sorted((str(k), str(v)) for k, v in selector.items())),
        models=tuple(models),
        threshold_pct=threshold,
    )
