"""Who holds what: usage per tenant and per cohort (used, borrowed, lent), from the live leases.

The ledger keeps, per cohort, the pool usage that borrowing is checked against: each member's
usage beyond its private (unlendable) quota, Σ max(0, used - private). A cohort is full when that
reaches the sum of its members' lendable quota.

A lease admitted by borrowing stays marked `borrowed` (reclaimable) only while its tenant is
actually over nominal: when the tenant's unborrowed leases end, its oldest borrowed leases are
promoted to unborrowed as long as they fit within nominal.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace

from gpupool.domain.errors import InvalidQuota
from gpupool.quota.book import QuotaBook
from gpupool.quota.lease import Lease


class _Account:
    __slots__ = ("compute", "leases", "plain", "pods", "reclaimable", "used")

    def __init__(self) -> None:
        self.used = 0
        self.plain = 0  # amount of leases not marked borrowed
        self.pods = 0
        self.compute = 0
        self.leases: dict[str, Lease] = {}
        self.reclaimable: dict[str, Lease] = {}  # the leases a reclaim may take, kept in step

    def put(self, lease: Lease) -> None:
        self.leases[lease.id] = lease
        if lease.reclaimable:
            self.reclaimable[lease.id] = lease
        else:
            self.reclaimable.pop(lease.id, None)


class Ledger:
    def __init__(self, book: QuotaBook) -> None:
        self.book = book
        self._accounts: dict[str, _Account] = {q.name: _Account() for q in book}
        self._tenant_of: dict[str, str] = {}
        self._pool_used: dict[str, int] = {c: 0 for c in book.cohorts()}

    @classmethod
    def of(cls, book: QuotaBook, leases: Iterable[Lease]) -> Ledger:
        """A ledger over `book` holding `leases`, as `add` of each in turn would leave it, made
        in one pass: an admission round starts from every admitted pod's charge (thousands in a
        one-tenant fill, where adding them one by one was most of the round). A cohort's pool
        usage is each member's share at its final usage: the shares `add` accumulates step by
        step sum to the same (a share of nothing is nothing)."""
        out = cls(book)
        accounts, tenant_of = out._accounts, out._tenant_of
        for lease in leases:
            if not lease.live:
                raise InvalidQuota(
                    f"lease {lease.id} is {lease.phase.value}; only live leases count"
                )
            if lease.id in tenant_of:
                raise InvalidQuota(f"lease {lease.id} is already in the ledger")
            account = accounts.get(lease.tenant) or out._account(lease.tenant)
            account.used += lease.amount
            if not lease.borrowed:
                account.plain += lease.amount
            account.pods += 1
            account.compute += lease.compute_milli
            account.leases[lease.id] = lease
            if lease.reclaimable:
                account.reclaimable[lease.id] = lease
            tenant_of[lease.id] = lease.tenant
        for quota in book:
            if quota.cohort is not None:
                out._pool_used[quota.cohort] += out.pool_share(quota.name)
        return out

    @classmethod
    def joined(cls, book: QuotaBook, owner: Mapping[str, Ledger]) -> Ledger:
        """One ledger over `book` from ledgers kept apart, each tenant's account and each cohort's
        pool taken from the ledger `owner` names for the tenant (a tenant it does not name has
        an empty account). The parts must not share a cohort (borrowing is within one) and are
        not written after: their accounts are shared, not copied."""
        out = cls.__new__(cls)
        out.book = book
        out._accounts = {}
        out._tenant_of = {}
        out._pool_used = {c: 0 for c in book.cohorts()}
        for quota in book:
            part = owner.get(quota.name)
            account = None if part is None else part._accounts.get(quota.name)
            out._accounts[quota.name] = _Account() if account is None else account
            if account is not None:
                out._tenant_of.update(dict.fromkeys(account.leases, quota.name))
            if part is not None and quota.cohort is not None:
                out._pool_used[quota.cohort] = part._pool_used.get(quota.cohort, 0)
        return out

    # -- reading -------------------------------------------------------------------------------
    def _account(self, tenant: str) -> _Account:
        account = self._accounts.get(tenant)
        if account is None:
            raise InvalidQuota(
                f"tenant {tenant!r} has no quota; known tenants: {self.book.names()}"
            )
        return account

    def used(self, tenant: str) -> int:
        return self._account(tenant).used

    def pods(self, tenant: str) -> int:
        return self._account(tenant).pods

    def compute(self, tenant: str) -> int:
        return self._account(tenant).compute

    def borrowed(self, tenant: str) -> int:
        """How far the tenant is over its nominal quota (what it has borrowed from its cohort)."""
        return max(0, self.used(tenant) - self.book[tenant].nominal)

    def borrowed_marked(self, tenant: str) -> int:
        """The amount held by leases marked borrowed (reclaimable); at least `borrowed`."""
        account = self._account(tenant)
        return account.used - account.plain

    def pool_share(self, tenant: str, used: int | None = None) -> int:
        """The tenant's draw on its cohort's lendable pool at usage `used` (default: now)."""
        quota = self.book[tenant]
        if quota.cohort is None:
            return 0
        amount = self.used(tenant) if used is None else used
        return max(0, amount - quota.private)

    def pool_used(self, cohort: str) -> int:
        return self._pool_used.get(cohort, 0)

    def pool_free(self, cohort: str) -> int:
        return self.book.pool_capacity(cohort) - self.pool_used(cohort)

    def lent(self, tenant: str) -> int:
        """This tenant's share of what its cohort's borrowers hold, split over the lenders in
        proportion to the lendable quota each leaves unused."""
        quota = self.book[tenant]
        members = self.book.cohort(quota.cohort)
        if not members:
            return 0
        borrowed_total = sum(self.borrowed(m.name) for m in members)
        if borrowed_total == 0:
            return 0
        unused = {
            m.name: max(0, m.lendable - self.pool_share(m.name, min(self.used(m.name), m.nominal)))
            for m in members
        }
        total_unused = sum(unused.values())
        if total_unused == 0:
            return 0
        return borrowed_total * unused[tenant] // total_unused

    def leases(self, tenant: str) -> Iterable[Lease]:
        return self._account(tenant).leases.values()

    def reclaimable_leases(self, tenant: str) -> Iterable[Lease]:
        """The tenant's leases that are `reclaimable` (borrowed or preemptible, not exclusive)."""
        return self._account(tenant).reclaimable.values()

    def lease(self, lease_id: str) -> Lease | None:
        tenant = self._tenant_of.get(lease_id)
        return None if tenant is None else self._accounts[tenant].leases[lease_id]

    def __iter__(self) -> Iterator[Lease]:
        for account in self._accounts.values():
            yield from account.leases.values()

    def __len__(self) -> int:
        return len(self._tenant_of)

    def total_used(self) -> int:
        return sum(a.used for a in self._accounts.values())

    # -- writing -------------------------------------------------------------------------------
    def _set_used(self, tenant: str, account: _Account, used: int) -> None:
        cohort = self.book[tenant].cohort
        if cohort is not None:
            self._pool_used[cohort] += self.pool_share(tenant, used) - self.pool_share(tenant)
        account.used = used

    def add(self, lease: Lease) -> None:
        if not lease.live:
            raise InvalidQuota(f"lease {lease.id} is {lease.phase.value}; only live leases count")
        if lease.id in self._tenant_of:
            raise InvalidQuota(f"lease {lease.id} is already in the ledger")
        account = self._account(lease.tenant)
        self._set_used(lease.tenant, account, account.used + lease.amount)
        if not lease.borrowed:
            account.plain += lease.amount
        account.pods += 1
        account.compute += lease.compute_milli
        account.put(lease)
        self._tenant_of[lease.id] = lease.tenant

    def update(self, lease: Lease) -> None:
        """Record a phase change of a live lease (same amount); a terminal one is removed."""
        old = self.lease(lease.id)
        if old is None:
            raise InvalidQuota(f"lease {lease.id} is not in the ledger")
        if lease.amount != old.amount or lease.tenant != old.tenant:
            raise InvalidQuota(f"lease {lease.id}: amount and tenant cannot change")
        if not lease.live:
            self.remove(lease.id)
            return
        account = self._accounts[lease.tenant]
        account.plain += (0 if lease.borrowed else lease.amount) - (
            0 if old.borrowed else old.amount
        )
        account.put(lease)

    def remove(self, lease_id: str) -> Lease:
        """Drop a lease; then promote the tenant's oldest borrowed leases that now fit nominal."""
        tenant = self._tenant_of.pop(lease_id, None)
        if tenant is None:
            raise InvalidQuota(f"lease {lease_id} is not in the ledger")
        account = self._accounts[tenant]
        lease = account.leases.pop(lease_id)
        account.reclaimable.pop(lease_id, None)
        self._set_used(tenant, account, account.used - lease.amount)
        if not lease.borrowed:
            account.plain -= lease.amount
        account.pods -= 1
        account.compute -= lease.compute_milli
        if account.plain < account.used:
            self._promote(tenant, account)
        return lease

    def _promote(self, tenant: str, account: _Account) -> None:
        nominal = self.book[tenant].nominal
        borrowed = sorted(
            (le for le in account.leases.values() if le.borrowed),
            key=lambda le: (le.reserved_at, le.id),
        )
        for lease in borrowed:
            if account.plain + lease.amount > nominal:
                break
            account.put(replace(lease, borrowed=False))
            account.plain += lease.amount
