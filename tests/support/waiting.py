"""Waiting on a condition with a hang guard: the one way a test waits.

A test never sleeps a fixed time and then asserts: it waits for the condition it needs, and the
timeout only turns a hang into a failure that says what never happened (it is not a speed claim,
so make it generous). The synchronous form polls with the dev cluster's `poll_until`; the async
form yields to the event loop between checks, for tests that drive their own loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from gpupool.devcluster.polling import poll_until

T = TypeVar("T")

What = str | Callable[[], str]  # a callable is only called on failure (a log tail, say)


def _gave_up(timeout_s: float, what: What) -> AssertionError:
    said = what() if callable(what) else what
    return AssertionError(f"gave up after {timeout_s:g} s (a hang guard) waiting for {said}")


def wait_until(
    check: Callable[[], T | None], timeout_s: float, what: What, *, interval_s: float = 0.1
) -> T:
    """`check`'s first truthy result; an AssertionError naming `what` if none comes in time.
    `check` may itself assert, to fail at once on something that must hold while waiting."""
    result = poll_until(check, timeout_s=timeout_s, interval_s=interval_s)
    if not result:
        raise _gave_up(timeout_s, what)
    return result


async def wait_until_async(
    check: Callable[[], T | None], timeout_s: float, what: What, *, interval_s: float = 0.01
) -> T:
    """As `wait_until`, inside a running event loop: the other tasks run between checks."""
    try:
        async with asyncio.timeout(timeout_s):
            while not (result := check()):
                await asyncio.sleep(interval_s)
    except TimeoutError:
        raise _gave_up(timeout_s, what) from None
    return result


async def wait_for_async(
    check: Callable[[], Awaitable[T | None]],
    timeout_s: float,
    what: What,
    *,
    interval_s: float = 0.1,
) -> T:
    """As `wait_until_async`, for a check that must itself be awaited (a browser's DOM, say)."""
    try:
        async with asyncio.timeout(timeout_s):
            while not (result := await check()):
                await asyncio.sleep(interval_s)
    except TimeoutError:
        raise _gave_up(timeout_s, what) from None
    return result
