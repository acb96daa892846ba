"""Which GpuLeases a change touches, for the lease loop's rounds over what changed: the lease
itself, the leases of a changed pod (a pod is named by namespace/name in the watch's changes,
a lease by its own key), those on a changed GpuNode (the charge audit's card sizes) and those
of a tenant whose GpuQuota changed (its TTL, grace and budget).

The index is made from every lease in a round over everything and kept by each round over what
changed: every lease made, changed or deleted is a watched change the loop is owed, so the
index knows every lease as long as the loop sees every change (the manager owes a round
everything after one that failed, whose changes went with it). Pure.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from gpupool.state.lease import LeaseRecord

_Where = tuple[str, str, str]  # (pod key, node, tenant) a lease is indexed under


class LeaseIndex:
    def __init__(self) -> None:
        self._where: dict[str, _Where] = {}  # lease key -> where it is indexed
        self._by: tuple[dict[str, set[str]], ...] = ({}, {}, {})  # pod key, node, tenant

    def __len__(self) -> int:
        return len(self._where)

    def rebuild(self, leases: Iterable[LeaseRecord]) -> None:
        """Every lease, from a round over everything."""
        self._where.clear()
        for by in self._by:
            by.clear()
        for lease in leases:
            self.add(lease)

    def add(self, lease: LeaseRecord) -> None:
        where = (lease.pod.key, lease.node or "", lease.tenant)
        if self._where.get(lease.key) == where:
            return
        self.drop(lease.key)
        self._where[lease.key] = where
        for by, value in zip(self._by, where, strict=True):
            by.setdefault(value, set()).add(lease.key)

    def drop(self, key: str) -> None:
        where = self._where.pop(key, None)
        if where is None:
            return
        for by, value in zip(self._by, where, strict=True):
            keys = by.get(value)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del by[value]

    def seen(
        self, asked: Collection[str], found: Collection[LeaseRecord], unreadable: Collection[str]
    ) -> set[str]:
        """A round read `asked` and found `found` (and `unreadable`, keys that did not decode:
        they stay as they were): the leases asked for and not there are gone. Returns the keys
        of the gone leases' pods (a pod whose lease was deleted may need it made again)."""
        there = {lease.key for lease in found} | set(unreadable)
        for lease in found:
            self.add(lease)
        pods: set[str] = set()
        for key in asked:
            if key not in there:
                where = self._where.get(key)
                if where is not None:
                    pods.add(where[0])
                self.drop(key)
        return pods

    def touched(
        self,
        *,
        leases: Iterable[str] = (),
        pods: Iterable[str] = (),
        nodes: Iterable[str] = (),
        tenants: Iterable[str] = (),
    ) -> set[str]:
        """The lease keys changes to these leases, pods (namespace/name), GpuNodes and tenants'
        GpuQuotas touch."""
        out = set(leases)
        for by, names in zip(self._by, (pods, nodes, tenants), strict=True):
            for name in names:
                out |= by.get(name, set())
        return out
