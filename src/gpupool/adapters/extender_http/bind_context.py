"""The long-lived things bind's steps work with, as kube-scheduler's framework handle: the cache,
the API, the planners, the per-node ledgers and locks, the writer of bound pods' leases, the timer
that reports each step's duration (the server's metrics), and the operators' compute-mode
defaults. What one bind has found so far
is not here but in its `BindState` (bind_state.py); the gangs' held room is not here either: only
the gang steps (gang_bind.py) are given it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gpupool.adapters.extender_http.api import ExtenderApi
from gpupool.adapters.extender_http.lease_writer import LeaseWriter
from gpupool.adapters.extender_http.ledger import LEDGER_MAX_AGE_S, Ledgers
from gpupool.adapters.extender_http.locks import KeyedLocks
from gpupool.adapters.extender_http.plans import Planners
from gpupool.domain.compute_modes import BUILT_IN, ComputeModes
from gpupool.state.cluster import ClusterCache


@dataclass(slots=True)
class StepTimer:
    """Reports each bind step's seconds to `on_step` (set by the server: a histogram)."""

    on_step: Callable[[str, float], None] | None = None

    def done(self, step: str, started: float) -> float:
        """Report `step` as started at `started` (perf_counter); now, for the next step."""
        now = time.perf_counter()
        if self.on_step is not None:
            self.on_step(step, now - started)
        return now


@dataclass(frozen=True, slots=True)
class BindContext:
    cache: ClusterCache
    api: ExtenderApi
    planners: Planners
    ledgers: Ledgers = field(default_factory=Ledgers)
    node_locks: KeyedLocks = field(default_factory=KeyedLocks)
    ledger_max_age_s: float = LEDGER_MAX_AGE_S
    timer: StepTimer = field(default_factory=StepTimer)
    leases: LeaseWriter = field(default_factory=LeaseWriter)  # GpuLeases after their Binding
    monotonic: Callable[[], float] = time.monotonic  # the ledgers' age (the ledger reads no clock)
    # the operators' compute-mode defaults now (the ConfigMap's last good settings)
    compute_modes: Callable[[], ComputeModes] = lambda: BUILT_IN
