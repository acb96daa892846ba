"""Blast radius of one, decided (pure: no clock, no I/O): which objects a loop has set aside
because processing them failed, when each is due to be tried again, and whether a failure is
news (worth an Event) or the same error again.

A loop's round still decides everything at once, but an object whose decoding or handling
raises is set aside with its reason and the rest of the round goes on. A set-aside object is
left out of the rounds until its per-object exponential backoff (`Backoff`: base, doubling, cap,
as client-go's per-item rate limiter) has passed, then tried again; a success forgets it.
`plan_isolated` does the same for a pure plan over many items (leases, nodes, tenants): when the
whole plan raises, each item is planned alone to find the ones that raise, and the plan is made
again without them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")
P = TypeVar("P")

ERROR_CHARS = 300  # of an error's text in an Event or a log line


@dataclass(frozen=True, slots=True)
class Backoff:
    """Per-object exponential backoff: `base_s` after the first failure, doubling, at most
    `cap_s`."""

    base_s: float = 1.0
    cap_s: float = 300.0

    def __post_init__(self) -> None:
        if not 0 < self.base_s <= self.cap_s:
            raise ValueError(f"backoff needs 0 < base ({self.base_s}) <= cap ({self.cap_s})")

    def delay(self, failures: int) -> float:
        """Seconds to wait after the `failures`-th failure in a row (0 for none)."""
        if failures <= 0:
            return 0.0
        doublings = min(failures - 1, 62)  # 2**62 * base is past any cap: no overflow
        return min(self.cap_s, self.base_s * 2.0**doublings)


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """An object one step of a loop processes: `step` (admission, expiry, ...), its `kind`
    (Pod, GpuLease, GpuQuota, GpuNode, ...) and `key` (namespace/name, or name)."""

    step: str
    kind: str
    key: str


@dataclass(frozen=True, slots=True)
class Failure:
    """One failure recorded: `new` when the object's error differs from the last one reported
    for it (an Event is written only then), `retry_at` when it is tried again."""

    ref: ObjectRef
    error: str
    failures: int  # in a row, this one included
    retry_at: float
    new: bool


@dataclass(frozen=True, slots=True)
class _Entry:
    failures: int
    retry_at: float
    error: str


def error_text(err: BaseException) -> str:
    """`Type: message`, one line, bounded (never a traceback)."""
    text = " ".join(str(err).split()) or "(no message)"
    out = f"{type(err).__name__}: {text}"
    return out if len(out) <= ERROR_CHARS else out[: ERROR_CHARS - 1] + "…"


class SetAside:
    """The objects one loop has set aside, and their backoff."""

    def __init__(self, backoff: Backoff | None = None) -> None:
        self.backoff = backoff or Backoff()
        self._entries: dict[ObjectRef, _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, ref: object) -> bool:
        return ref in self._entries

    def refs(self) -> tuple[ObjectRef, ...]:
        return tuple(self._entries)

    def due(self, ref: ObjectRef, now: float) -> bool:
        """Whether the round processes the object now: never set aside, or its backoff over."""
        entry = self._entries.get(ref)
        return entry is None or now >= entry.retry_at

    def next_retry(self, after: float) -> float | None:
        """When the first object set aside is due again after `after` (None: none). One due
        already that its loop did not try (it was not in the round) waits for a later round."""
        return min((e.retry_at for e in self._entries.values() if e.retry_at > after), default=None)

    def retrying(self, ref: ObjectRef, now: float) -> bool:
        """The object is set aside and due: this round tries it again (a retry)."""
        entry = self._entries.get(ref)
        return entry is not None and now >= entry.retry_at

    def failed(self, ref: ObjectRef, error: str, now: float) -> Failure:
        entry = self._entries.get(ref)
        failures = 1 if entry is None else entry.failures + 1
        retry_at = now + self.backoff.delay(failures)
        self._entries[ref] = _Entry(failures, retry_at, error)
        return Failure(ref, error, failures, retry_at, entry is None or entry.error != error)

    def succeeded(self, ref: ObjectRef) -> bool:
        """Forget the object's failures; True when it had been set aside."""
        return self._entries.pop(ref, None) is not None

    def keep_only(self, step: str, kind: str, present: Iterable[str]) -> None:
        """Forget the objects of `step` and `kind` that are not `present` any more (deleted)."""
        keys = set(present)
        for ref in [r for r in self._entries if r.step == step and r.kind == kind]:
            if ref.key not in keys:
                del self._entries[ref]


def plan_isolated(
    items: Sequence[T], plan: Callable[[Sequence[T]], P]
) -> tuple[P, tuple[tuple[T, Exception], ...]]:
    """`plan(items)`; when it raises, the items whose plan alone raises are left out (with their
    error) and the plan is made again over the rest. When every one of several items raises
    alone, or the plan over the rest still raises, the failure is in no single item: the error
    goes up and the round fails, as before."""
    try:
        return plan(items), ()
    except Exception as err:
        first = err
    bad: list[tuple[T, Exception]] = []
    good: list[T] = []
    for item in items:
        try:
            plan([item])
        except Exception as err:
            bad.append((item, err))
        else:
            good.append(item)
    if not good and len(items) > 1:
        raise first
    return plan(good), tuple(bad)
