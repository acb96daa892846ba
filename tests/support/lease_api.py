"""An in-memory API server for one coordination Lease, as LeaderElector sees it through the
lightkube client (get/create/replace), and the clock such tests move by hand. The leader
election, the controller's and the extender's tests under election share them."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable
from typing import Any

from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import Status
from lightkube.resources.coordination_v1 import Lease

NS, NAME = "gpupool-system", "gpupool-extender"  # where the one Lease lives


class Clock:
    """Monotonic seconds that move only when a test sets `t`."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class FakeLeaseApi:
    """One namespace's Leases, as the API server keeps them: a replace whose resourceVersion is
    not the stored one is a 409, a create of an existing name too; `down` fails every call."""

    def __init__(self) -> None:
        self.leases: dict[str, Lease] = {}
        self.rv = 0
        self.down = False
        self.after_write: Callable[[], Awaitable[None]] | None = None  # the reply's delay

    def _check(self) -> None:
        if self.down:
            raise ConnectionError("API server unreachable")

    @staticmethod
    def _error(code: int, message: str) -> ApiError:
        return ApiError(status=Status(code=code, message=message))

    def _store(self, lease: Lease) -> None:
        self.rv += 1
        stored = copy.deepcopy(lease)
        assert stored.metadata is not None and stored.metadata.name is not None
        stored.metadata.resourceVersion = str(self.rv)
        self.leases[stored.metadata.name] = stored

    async def _replied(self) -> None:
        await asyncio.sleep(0)  # let other candidates' rounds interleave
        if self.after_write is not None:
            await self.after_write()

    async def get(self, kind: type[Lease], name: str, *, namespace: str) -> Lease:
        self._check()
        await asyncio.sleep(0)
        assert kind is Lease and namespace == NS
        if name not in self.leases:
            raise self._error(404, f"leases {name!r} not found")
        return copy.deepcopy(self.leases[name])

    async def create(self, lease: Lease) -> Lease:
        self._check()
        assert lease.metadata is not None and lease.metadata.name is not None
        if lease.metadata.name in self.leases:
            raise self._error(409, "already exists")
        self._store(lease)
        await self._replied()
        return copy.deepcopy(self.leases[lease.metadata.name])

    async def replace(self, lease: Lease) -> Lease:
        self._check()
        assert lease.metadata is not None and lease.metadata.name is not None
        stored = self.leases.get(lease.metadata.name)
        assert stored is not None and stored.metadata is not None
        if lease.metadata.resourceVersion != stored.metadata.resourceVersion:
            raise self._error(409, "the object has been modified")
        self._store(lease)
        await self._replied()
        return copy.deepcopy(self.leases[lease.metadata.name])

    def holder(self) -> str | None:
        lease = self.leases.get(NAME)
        return lease.spec.holderIdentity if lease is not None and lease.spec else None

    def spec(self) -> Any:
        return self.leases[NAME].spec
