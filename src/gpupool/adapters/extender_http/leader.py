"""Leader election on a coordination.k8s.io/v1 Lease, as client-go does it.

The holder renews every `retry_s`; a candidate takes over only when the record has not changed
for `lease_s` by its own monotonic clock (no trust in other machines' clocks). Every write is a
replace with the resourceVersion it read, so two candidates can never both win one round. A
holder that fails to renew within `renew_deadline_s` stops calling itself leader before its lease
could expire for others (renew deadline < lease duration), so two replicas never both bind.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease

log = logging.getLogger(__name__)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


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
    ) -> None:
        if not renew_deadline_s < lease_s:
            raise ValueError("the renew deadline must be shorter than the lease duration")
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_s = lease_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_s = retry_s
        self._renewed_at: float | None = None  # monotonic time of our last successful write
        self._observed: tuple[str | None, float] = (None, 0.0)  # (record rv, when it changed)

    def is_leader(self) -> bool:
        return (
            self._renewed_at is not None
            and time.monotonic() - self._renewed_at < self.renew_deadline_s
        )

    async def _try(self) -> None:
        now = _now()
        try:
            lease = await self.client.get(Lease, self.name, namespace=self.namespace)
        except ApiError as err:
            if err.status.code != 404:
                raise
            await self.client.create(
                Lease(
                    metadata=ObjectMeta(name=self.name, namespace=self.namespace),
                    spec=LeaseSpec(
                        holderIdentity=self.identity,
                        leaseDurationSeconds=self.lease_s,
                        acquireTime=now,
                        renewTime=now,
                        leaseTransitions=0,
                    ),
                )
            )
            self._renewed_at = time.monotonic()
            log.info("%s became leader (created %s/%s)", self.identity, self.namespace, self.name)
            return
        assert lease.metadata is not None
        spec = lease.spec or LeaseSpec()
        rv = lease.metadata.resourceVersion
        if rv != self._observed[0]:
            self._observed = (rv, time.monotonic())
        holder = spec.holderIdentity
        duration = spec.leaseDurationSeconds or self.lease_s
        expired = time.monotonic() - self._observed[1] > duration
        if holder and holder != self.identity and not expired:
            self._renewed_at = None
            return
        taking_over = holder != self.identity
        spec.holderIdentity = self.identity
        spec.leaseDurationSeconds = self.lease_s
        spec.renewTime = now
        if taking_over:
            spec.acquireTime = now
            spec.leaseTransitions = (spec.leaseTransitions or 0) + 1
        lease.spec = spec
        await self.client.replace(lease)  # carries metadata.resourceVersion: 409 if it moved
        self._renewed_at = time.monotonic()
        if taking_over:
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
                await self.client.replace(lease)
        except Exception as err:
            log.warning("could not release the leader lease: %s", err)
