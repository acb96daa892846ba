"""Blast radius of one, applied: a loop's `Containment` runs each object's decoding and handling
so that one object's failure fails only that object.

- `decode` takes a typed read (`state.listed.Listed`, decoded by the adapter): an object that did
  not decode is set aside (left out of the round) with its reason; the others go on.
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
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

from gpupool.adapters.kubernetes.decoded import reference
from gpupool.adapters.kubernetes.leader import NotLeader
from gpupool.controllers.isolation import (
    Backoff,
    Failure,
    ObjectRef,
    SetAside,
    error_text,
    plan_isolated,
)
from gpupool.ports import EventWriter
from gpupool.rfc3339 import format_time
from gpupool.state.listed import Listed, ObjectReference
from gpupool.state.pods import PodView

log = logging.getLogger("gpupool.controller.contain")

T = TypeVar("T")
P = TypeVar("P")

REASON = "ReconcileFailed"


class ReconcileObserver(Protocol):
    """What the controller's metrics hear (`adapters.metrics.controller.ControllerMetrics`)."""

    def reconcile_failed(self, loop: str, kind: str) -> None: ...

    def reconcile_retried(self, loop: str) -> None: ...

    def set_aside_now(self, loop: str, count: int) -> None: ...


def quota_ref(tenant: str) -> ObjectReference:
    """A tenant's GpuQuota (named after it), for an Event about the tenant."""
    return reference("GpuQuota", tenant)


def pod_ref(pod: PodView) -> ObjectReference:
    """A pod read alone (`ClusterApi.pod`), or one a loop names from its view."""
    return reference("Pod", pod.name, pod.namespace, pod.uid or None)


def lease_ref(name: str, namespace: str) -> ObjectReference:
    """A GpuLease the loop names without its listing (an Event names it)."""
    return reference("GpuLease", name, namespace)


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
        self._pending: list[tuple[Failure, ObjectReference]] = []

    def attempt(self, ref: ObjectRef, now: float) -> bool:
        """Whether to process the object this round (not while its backoff runs); a set-aside
        object tried again counts as a retry."""
        if not self.book.due(ref, now):
            return False
        if self.book.retrying(ref, now) and self.observer is not None:
            self.observer.reconcile_retried(self.loop)
        return True

    def fail(self, ref: ObjectRef, err: BaseException, now: float, obj: ObjectReference) -> None:
        failure = self.book.failed(ref, error_text(err), now)
        if self.observer is not None:
            self.observer.reconcile_failed(self.loop, ref.kind)
        log.warning(
            "%s (%s): %s %s set aside until %s: %s",
            self.loop, ref.step, ref.kind, ref.key, format_time(failure.retry_at), failure.error,
        )  # fmt: skip
        log.debug("%s %s failed", ref.kind, ref.key, exc_info=err)
        if failure.new:
            self._pending.append((failure, obj))

    def next_retry(self, after: float) -> float | None:
        """When an object set aside is next due to be tried again after `after` (the round's
        time): a deadline of the loop's (wall time; None: none)."""
        return self.book.next_retry(after)

    def succeeded(self, ref: ObjectRef) -> None:
        if self.book.succeeded(ref):
            log.info("%s (%s): %s %s processed again", self.loop, ref.step, ref.kind, ref.key)

    def decode(
        self, step: str, kind: str, listed: Listed[T], now: float, *, every: bool = True
    ) -> list[tuple[T, ObjectReference]]:
        """The read values (with their references) that go on this round: an object that did
        not decode is set aside, and one set aside is left out until its backoff has passed.
        `every`: `listed` is every object of its kind (one set aside and not listed is gone and
        forgotten); False for a round over some objects by key."""
        if not self.book:  # nothing set aside (the usual round): no bookkeeping per object
            for bad in listed.unreadable:
                self.fail(ObjectRef(step, kind, bad.ref.key), bad.error, now, bad.ref)
            return list(listed.read)
        out: list[tuple[T, ObjectReference]] = []
        keys: list[str] = []
        for bad in listed.unreadable:
            ref = ObjectRef(step, kind, bad.ref.key)
            keys.append(ref.key)
            if self.attempt(ref, now):
                self.fail(ref, bad.error, now, bad.ref)
        for value, about in listed.read:
            ref = ObjectRef(step, kind, about.key)
            keys.append(ref.key)
            if not self.attempt(ref, now):
                continue
            self.succeeded(ref)
            out.append((value, about))
        if every:
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
        obj: Callable[[T], ObjectReference],
        *,
        every: bool = True,
    ) -> P:
        """The pure `plan` over the items that are due; the items that make it raise are set
        aside (`obj` gives the object an Event names). `every`: as `decode`'s."""
        due = [i for i in items if self.attempt(ObjectRef(step, kind, key(i)), now)]
        result, bad = plan_isolated(due, plan)
        failed = {id(i) for i, _ in bad}
        for item, err in bad:
            self.fail(ObjectRef(step, kind, key(item)), err, now, obj(item))
        for item in due:
            if id(item) not in failed:
                self.succeeded(ObjectRef(step, kind, key(item)))
        if every:
            self.book.keep_only(step, kind, [key(i) for i in items])
        return result

    async def handle(
        self,
        step: str,
        obj: ObjectReference,
        work: Callable[[], Awaitable[object]],
        now: float,
        *,
        key: str | None = None,
    ) -> bool:
        """Run one object's writes; False when it failed (set aside) or waits for its
        backoff."""
        ref = ObjectRef(step, obj.kind, key if key is not None else obj.key)
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
    obj: ObjectReference,
    work: Callable[[], Awaitable[object]],
    now: float,
) -> None:
    """`work` through `contain.handle`; without a containment it runs bare (a failure raises)."""
    if contain is None:
        await work()
    else:
        await contain.handle(step, obj, work, now)
