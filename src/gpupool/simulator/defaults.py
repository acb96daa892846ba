"""The replay's defaults the command line shows, apart from the modules that use them (which
import numpy and the placement core), so that `gpupool simulate --help` starts fast."""

from __future__ import annotations

DEFAULT_TIME_SCALE = 10_000.0  # arrival times are divided by this (simulator.md, replay)
DEFAULT_TARGET_LOAD = 1.25  # peak offered GPU load the thinned cluster is sized for
DEFAULT_INTERVAL_S = 300.0  # seconds of replay time between defragmentation rounds
