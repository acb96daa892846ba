"""Blast radius of one, applied: a loop's `Containment` runs each object's decoding and handling
so that one object's failure fails only that object.

- `decode` reads a list of objects one by one: an object whose reader raises is set aside (left
  out of the round) with its reason; the others are decoded.
- `plan` runs a pure plan over many items through `isolation.plan_isolated`: when the plan
  raises, the items that make it raise are set aside and the plan is made over the rest.
- `handle` runs one object's writes: an error (other than the end of leadership or a
  cancellation) sets that object aside and the round goes on with the next.

A set-aside object is tried again on a later round once its per-object backoff has passed
(`isolation.SetAside`); a success forgets it. Each failure counts on
`gpupool_controller_reconcile_errors_total{loop,kind}`, each retry on
`..._reconcile_retries_total{loop}`; `report` writes a Warning Event `ReconcileFailed` on the
object for each new error (once per object and error, not every round) and updates the number of
objects set aside. Nothing here decides what a loop does; it only keeps one object's failure
from failing the others.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from gpupool.adapters.kubernetes.leader import NotLeader
from gpupool.adapters.wire import names
from gpupool.controllers.isolation import (
    Backoff,
    Failure,
    ObjectRef,
    SetAside,
    error_text,
    plan_isolated,
)
from gpupool.ports import EventWriter, Json
from gpupool.rfc3339 import format_time

log = logging.getLogger("gpupool.controller.contain")

T = TypeVar("T")
P = TypeVar("P")

REASON = "ReconcileFailed"

API_VERSIONS = {
    "Pod": "v1",
    "Node": "v1",
    "Deployment": "apps/v1",
    "StatefulSet": "apps/v1",
    "PodDisruptionBudget": "policy/v1",
}


class ReconcileObserver(Protocol):
    """What the controller's metrics hear (`adapters.metrics.controller.ControllerMetrics`)."""

    def reconcile_failed(self, loop: str, kind: str) -> None: ...

    def reconcile_retried(self, loop: str) -> None: ...

    def set_aside_now(self, loop: str, count: int) -> None: ...


def object_key(obj: Mapping[str, Any]) -> str:
    """namespace/name, or name for a cluster-scoped object."""
    meta = obj.get("metadata") or {}
    if not isinstance(meta, Mapping):
        return "?"
    name = str(meta.get("name") or "?")
    namespace = meta.get("namespace")
    return f"{namespace}/{name}" if namespace else name


def as_object(kind: str, obj: Mapping[str, Any]) -> Json:
    """The object with its kind and apiVersion (a list's items may lack them), for an Event."""
    meta = obj.get("metadata")
    return {
        **obj,
        "metadata": meta if isinstance(meta, Mapping) else {},
        "kind": kind,
        "apiVersion": obj.get("apiVersion") or API_VERSIONS.get(kind, names.API_VERSION),
    }


def quota_ref(tenant: str) -> Json:
    """A tenant's GpuQuota (named after it), for an Event about the tenant."""
    return {"apiVersion": names.API_VERSION, "kind": "GpuQuota", "metadata": {"name": tenant}}


def event_message(loop: str, failure: Failure) -> str:
    ref = failure.ref
    return (
        f"the gpupool controller's {loop} loop ({ref.step}) could not process {ref.kind} "
        f"{ref.key}: {failure.error}; it is set aside and tried again at "
        f"{format_time(failure.retry_at)} (failure {failure.failures} in a row); the loop goes "
        f"on with the other objects"
    )


class Containment:
    """One loop's set-aside objects, their Events and their metrics."""

    def __init__(
        self,
        loop: str,
        events: EventWriter,
        *,
        observer: ReconcileObserver | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        self.loop = loop
        self.events = events
        self.observer = observer
        self.book = SetAside(backoff)
        self._pending: list[tuple[Failure, Json]] = []

    def attempt(self, ref: ObjectRef, now: float) -> bool:
        """Whether to process the object this round (not while its backoff runs); a set-aside
        object tried again counts as a retry."""
        if not self.book.due(ref, now):
            return False
        if self.book.retrying(ref, now) and self.observer is not None:
            self.observer.reconcile_retried(self.loop)
        return True

    def fail(self, ref: ObjectRef, err: BaseException, now: float, obj: Mapping[str, Any]) -> None:
        failure = self.book.failed(ref, error_text(err), now)
        if self.observer is not None:
            self.observer.reconcile_failed(self.loop, ref.kind)
        log.warning(
            "%s (%s): %s %s set aside until %s: %s",
            self.loop, ref.step, ref.kind, ref.key, format_time(failure.retry_at), failure.error,
        )  # fmt: skip
        log.debug("%s %s failed", ref.kind, ref.key, exc_info=err)
        if failure.new:
            self._pending.append((failure, as_object(ref.kind, obj)))

    def next_retry(self, after: float) -> float | None:
        """When an object set aside is next due to be tried again after `after` (the round's
        time): a deadline of the loop's (wall time; None: none)."""
        return self.book.next_retry(after)

    def succeeded(self, ref: ObjectRef) -> None:
        if self.book.succeeded(ref):
            log.info("%s (%s): %s %s processed again", self.loop, ref.step, ref.kind, ref.key)

    def decode(
        self,
        step: str,
        kind: str,
        objects: Iterable[Json],
        read: Callable[[Json], T],
        now: float,
    ) -> list[tuple[T, Json]]:
        """Each object read alone: (value, its JSON) for those that read; one that raises is
        set aside, and one set aside is left out until its backoff has passed."""
        out: list[tuple[T, Json]] = []
        keys: list[str] = []
        if not self.book:  # nothing set aside (the usual round): no bookkeeping per object
            for obj in objects:
                try:
                    value = read(obj)
                except Exception as err:
                    self.fail(ObjectRef(step, kind, object_key(obj)), err, now, obj)
                    continue
                out.append((value, obj))
            return out
        for obj in objects:
            ref = ObjectRef(step, kind, object_key(obj))
            keys.append(ref.key)
            if not self.attempt(ref, now):
                continue
            try:
                value = read(obj)
            except Exception as err:
                self.fail(ref, err, now, obj)
                continue
            self.succeeded(ref)
            out.append((value, obj))
        self.book.keep_only(step, kind, keys)
        return out

    def plan(
        self,
        step: str,
        kind: str,
        items: Sequence[T],
        key: Callable[[T], str],
        plan: Callable[[Sequence[T]], P],
        now: float,
        obj: Callable[[T], Mapping[str, Any]],
    ) -> P:
        """The pure `plan` over the items that are due; the items that make it raise are set
        aside (`obj` gives the object an Event names)."""
        due = [i for i in items if self.attempt(ObjectRef(step, kind, key(i)), now)]
        result, bad = plan_isolated(due, plan)
        failed = {id(i) for i, _ in bad}
        for item, err in bad:
            self.fail(ObjectRef(step, kind, key(item)), err, now, obj(item))
        for item in due:
            if id(item) not in failed:
                self.succeeded(ObjectRef(step, kind, key(item)))
        self.book.keep_only(step, kind, [key(i) for i in items])
        return result

    async def handle(
        self,
        step: str,
        kind: str,
        obj: Mapping[str, Any],
        work: Callable[[], Awaitable[object]],
        now: float,
        *,
        key: str | None = None,
    ) -> bool:
        """Run one object's writes; False when it failed (set aside) or waits for its
        backoff."""
        ref = ObjectRef(step, kind, key if key is not None else object_key(obj))
        if not self.attempt(ref, now):
            return False
        try:
            await work()
        except (asyncio.CancelledError, NotLeader):
            raise
        except Exception as err:
            self.fail(ref, err, now, obj)
            return False
        self.succeeded(ref)
        return True

    async def report(self, now: float) -> None:
        """Write the Events of this round's new failures (best effort) and the count set
        aside."""
        pending, self._pending = self._pending, []
        stamp = format_time(now)
        for failure, obj in pending:
            try:
                await self.events.event(
                    obj, REASON, event_message(self.loop, failure), warning=True,
                    now_rfc3339=stamp,
                )  # fmt: skip
            except (asyncio.CancelledError, NotLeader):
                raise
            except Exception as err:
                log.warning("could not write the %s event on %s %s: %s", REASON,
                            failure.ref.kind, failure.ref.key, err)  # fmt: skip
        if self.observer is not None:
            self.observer.set_aside_now(self.loop, len(self.book))


async def run_one(
    contain: Containment | None,
    step: str,
    kind: str,
    obj: Mapping[str, Any],
    work: Callable[[], Awaitable[object]],
    now: float,
) -> None:
    """`work` through `contain.handle`; without a containment it runs bare (a failure raises)."""
    if contain is None:
        await work()
    else:
        await contain.handle(step, kind, obj, work, now)
