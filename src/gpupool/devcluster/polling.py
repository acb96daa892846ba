"""Polling: wait until a check passes, for readiness probes and for tests against the cluster."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def poll_until(
    check: Callable[[], T | None], *, timeout_s: float, interval_s: float = 0.1
) -> T | None:
    """Call `check` until it returns something truthy (returned) or `timeout_s` passes (None)."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() >= deadline:
            return None
        time.sleep(interval_s)
