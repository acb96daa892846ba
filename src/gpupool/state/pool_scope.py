"""What of a GpuPool decides its status: which cards it covers and the fragmentation threshold
(decoded once, `adapters.kubernetes.pool_scope`; `controllers.pool_status` uses it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpupool.domain.errors import GpupoolError

DEFAULT_THRESHOLD_PCT = 30


class InvalidPoolScope(GpupoolError):
    """A GpuPool's node selector, models or threshold cannot be read (the message says which)."""


@dataclass(frozen=True, slots=True)
class PoolScope:
    name: str
    generation: int
    node_selector: tuple[tuple[str, str], ...] = ()
    models: tuple[str, ...] = ()  # empty: every model
    threshold_pct: int = DEFAULT_THRESHOLD_PCT  # spec.defragThresholdPercent

    def covers(self, labels: Mapping[str, str], model: str) -> bool:
        if self.models and model not in self.models:
            return False
        return all(labels.get(k) == v for k, v in self.node_selector)
