"""Leader election on a coordination.k8s.io/v1 Lease, as client-go does it: shared by the
scheduler extender and the controller, each under its own Lease name.

The holder renews every `retry_s`; a candidate takes over only when the record has not changed
for `lease_s` by its own monotonic clock (no trust in other machines' clocks). Every write is a
replace with the resourceVersion it read, so two candidates can never both win one round. A
holder that fails to renew within `renew_deadline_s` stops calling itself leader before its lease
could expire for others (renew deadline < lease duration), so two replicas never both act
(bind, for the extender; reconcile, for the controller).

The holder's deadline runs from the start of the round that wrote the lease, not from the reply:
the write lands on the API server after that start, so others count their `lease_s` from later
than we count our `renew_deadline_s`, however slow the reply was. What a round does with the record
it read is the pure `decide`.

A holder started with an advertise URL writes it on the Lease (annotation `gpupool.io/leader-url`)
in the same write that acquires or renews it, and removes it otherwise (a holder with no URL, a
release), so the annotation always belongs to the holder named beside it. Followers read it in
the round they already make and offer it (`leader_url`) while the record is fresh: the extender's
standby forwards /bind there (the controller advertises none).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease

from gpupool.adapters.wire.names import ANN_LEADER_URL

log = logging.getLogger(__name__)

LEADER_URL_ANNOTATION = ANN_LEADER_URL


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Step(enum.Enum):
    FOLLOW = "follow"  # another replica holds a lease that has not expired: leave it
    RENEW = "renew"  # the lease is ours: write it again
    TAKE_OVER = "take_over"  # nobody holds it, it was released, or its holder went quiet


@dataclass(frozen=True, slots=True)
class Seen:
    """The lease record's resourceVersion and when, by our monotonic clock, it was first seen."""

    rv: str | None
    since: float


def decide(
    identity: str, holder: str | None, duration_s: float, rv: str | None, seen: Seen, now: float
) -> tuple[Step, Seen]:
    """What a candidate does with the record it read at `now`, and what it has seen since.

    A record another replica holds expires `duration_s` after it last changed, by our clock: a
    holder that renews changes its resourceVersion, and every change starts the count again."""
    if rv != seen.rv:
        seen = Seen(rv, now)
    if holder == identity:
        return Step.RENEW, seen
    if holder and now - seen.since <= duration_s:
        return Step.FOLLOW, seen
    return Step.TAKE_OVER, seen


@dataclass(frozen=True, slots=True)
class Followed:
    """Another replica's lease as last read: who holds it, the URL it advertised, for how long."""

    holder: str
    url: str | None
    duration_s: float


def _with_url(metadata: ObjectMeta, url: str | None) -> None:
    """The annotation says `url`, or is gone when there is none (others' annotations stay)."""
    annotations = dict(metadata.annotations or {})
    if url:
        annotations[LEADER_URL_ANNOTATION] = url
    else:
        annotations.pop(LEADER_URL_ANNOTATION, None)
    metadata.annotations = annotations or None


class LeaderElector:
    def __init__(
        self,
        client: AsyncClient,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_s: int = 15,
        renew_deadline_s: float = 10.0,
        retry_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        on_elected: Callable[[], None] | None = None,
        advertise_url: str | None = None,
    ) -> None:
        """`on_elected` is called (synchronously, before any caller can see `is_leader()` turn
        true) each time this replica becomes leader again after not being leader.
        `advertise_url` is written on the Lease while this replica holds it (None: none is)."""
        if not renew_deadline_s < lease_s:
            raise ValueError("the renew deadline must be shorter than the lease duration")
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_s = lease_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_s = retry_s
        self.clock = clock
        self.on_elected = on_elected
        self._renewed_at: float | None = None  # start of the round of our last successful write
        self._seen = Seen(None, 0.0)
        self.advertise_url = advertise_url
        self._followed: Followed | None = None  # the other holder's lease, from our last read

    def is_leader(self) -> bool:
        return (
            self._renewed_at is not None and self.clock() - self._renewed_at < self.renew_deadline_s
        )

    def leader_url(self) -> str | None:
        """The URL the replica holding the lease advertised there, as of our last round; None
        while we lead, when it advertised none, when nobody holds it, or once its record has gone
        unchanged by our clock for longer than its duration (a dead holder: it may never answer).
        """
        followed = self._followed
        if followed is None or followed.url is None or self.is_leader():
            return None
        if self.clock() - self._seen.since > followed.duration_s:
            return None
        return followed.url

    def _won(self, round_started: float) -> None:
        if not self.is_leader() and self.on_elected is not None:
            self.on_elected()
        self._renewed_at = round_started

    async def _try(self) -> None:
        started = self.clock()
        now = _now()
        try:
            lease = await self.client.get(Lease, self.name, namespace=self.namespace)
        except ApiError as err:
            if err.status.code != 404:
                raise
            await self.client.create(
                Lease(
                    metadata=ObjectMeta(
                        name=self.name,
                        namespace=self.namespace,
                        annotations=(
                            {LEADER_URL_ANNOTATION: self.advertise_url}
                            if self.advertise_url
                            else None
                        ),
                    ),
                    spec=LeaseSpec(
                        holderIdentity=self.identity,
                        leaseDurationSeconds=self.lease_s,
                        acquireTime=now,
                        renewTime=now,
                        leaseTransitions=0,
                    ),
                )
            )
            self._followed = None
            self._won(started)
            log.info("%s became leader (created %s/%s)", self.identity, self.namespace, self.name)
            return
        assert lease.metadata is not None
        spec = lease.spec or LeaseSpec()
        holder = spec.holderIdentity
        duration_s = spec.leaseDurationSeconds or self.lease_s
        step, self._seen = decide(
            self.identity,
            holder,
            duration_s,
            lease.metadata.resourceVersion,
            self._seen,
            self.clock(),
        )
        if step is Step.FOLLOW:
            url = (lease.metadata.annotations or {}).get(LEADER_URL_ANNOTATION) or None
            self._followed = Followed(holder or "", url, duration_s)
            self._renewed_at = None
            return
        self._followed = None
        _with_url(lease.metadata, self.advertise_url)
        spec.holderIdentity = self.identity
        spec.leaseDurationSeconds = self.lease_s
        spec.renewTime = now
        if step is Step.TAKE_OVER:
            spec.acquireTime = now
            spec.leaseTransitions = (spec.leaseTransitions or 0) + 1
        lease.spec = spec
        await self.client.replace(lease)  # carries metadata.resourceVersion: 409 if it moved
        self._won(started)
        if step is Step.TAKE_OVER:
            log.info("%s became leader (took over from %s)", self.identity, holder or "nobody")

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self._try()
            except Exception as err:
                log.warning("leader election round failed: %s", err)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.retry_s)

    async def release(self) -> None:
        """Give the lease up on shutdown so another replica takes over at once."""
        if not self.is_leader():
            return
        self._renewed_at = None
        try:
            lease = await self.client.get(Lease, self.name, namespace=self.namespace)
            if lease.spec is not None and lease.spec.holderIdentity == self.identity:
                lease.spec.holderIdentity = None
                lease.spec.leaseDurationSeconds = 1
                if lease.metadata is not None:
                    _with_url(lease.metadata, None)
                await self.client.replace(lease)
        except Exception as err:
            log.warning("could not release the leader lease: %s", err)


class NotLeader(Exception):
    """A write was refused: this replica is not (or no longer) leader."""
