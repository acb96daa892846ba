"""The coordination.k8s.io/v1 Lease a leader election holds, as the e2e leader tests read it.

What the tests assert about a takeover is an order, not a duration: no read of the Lease that
returned before the dead leader's term ran out (its last renewTime plus leaseDurationSeconds, as
written on the Lease) shows anything but that term, and later the survivor holds it. A read is
dated after its reply by this machine's clock, which the replicas share (they write renewTime
with it): a change seen by then happened before then, so a takeover seen early is a real one.
Nothing is measured against a threshold.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.devcluster.apiclient import KubeApi
from support.waiting import What, wait_until

COORDINATION = "/apis/coordination.k8s.io/v1"


def _time(value: object) -> dt.datetime | None:
    return dt.datetime.fromisoformat(str(value)) if value else None


@dataclass(frozen=True, slots=True)
class Term:
    """One read of the Lease: who holds it, since when, when it was last renewed, for how long."""

    holder: str | None
    acquired: dt.datetime | None
    renewed: dt.datetime | None
    duration: dt.timedelta
    transitions: int
    resource_version: str

    @classmethod
    def of(cls, lease: Mapping[str, Any]) -> Term:
        spec = lease.get("spec") or {}
        return cls(
            holder=spec.get("holderIdentity") or None,
            acquired=_time(spec.get("acquireTime")),
            renewed=_time(spec.get("renewTime")),
            duration=dt.timedelta(seconds=int(spec.get("leaseDurationSeconds") or 0)),
            transitions=int(spec.get("leaseTransitions") or 0),
            resource_version=str(lease["metadata"]["resourceVersion"]),
        )

    @property
    def expires(self) -> dt.datetime:
        """When this term runs out unless renewed: renewTime + leaseDurationSeconds."""
        assert self.renewed is not None, "a Lease never renewed has no term"
        return self.renewed + self.duration


def lease_path(ns: str, name: str) -> str:
    return f"{COORDINATION}/namespaces/{ns}/leases/{name}"


def read_term(api: KubeApi, ns: str, name: str) -> Term | None:
    """The Lease as the API server holds it now; None while there is none."""
    lease: dict[str, Any] | None = api.find(lease_path(ns, name))
    return None if lease is None else Term.of(lease)


def holder(api: KubeApi, ns: str, name: str) -> str | None:
    term = read_term(api, ns, name)
    return None if term is None else term.holder


def renewed_past_one_term(
    api: KubeApi, ns: str, name: str, leader: str, check: Callable[[], None], what: What
) -> Term:
    """Watch the Lease until `leader` has renewed it beyond the term it held at the first read
    (a renewTime past that read's expiry), calling `check` (which asserts) at every read in
    between; the last read. The hang guard is three such terms and 20 s more."""
    first = read_term(api, ns, name)
    assert first is not None and first.holder == leader, f"{first}: {leader} does not lead"

    def renewed_past() -> Term | None:
        now = read_term(api, ns, name)
        assert now is not None and now.holder == leader, f"{now}: {leader} lost the lease"
        check()
        return now if now.renewed is not None and now.renewed > first.expires else None

    timeout_s = 3 * first.duration.total_seconds() + 20
    return wait_until(renewed_past, timeout_s, what, interval_s=0.2)


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def wait_for_takeover(
    api: KubeApi,
    ns: str,
    name: str,
    dead: Term,
    survivor: str,
    what: What,
    observe: Callable[[], Callable[[], None]] = lambda: lambda: None,
) -> Term:
    """The survivor's term, once it holds the Lease; fails if a read that returned before
    `dead.expires` shows any change to the dead holder's last term. `observe` reads whatever
    else must stay as it is while that term runs, and returns the check to make on what it read
    (made only when the read, too, returned before the term ran out). The hang guard is three
    terms and 20 s more."""

    def taken_over() -> Term | None:
        term = read_term(api, ns, name)
        check = observe()
        read_by = _utc_now()
        if read_by < dead.expires:
            assert term == dead, f"the Lease changed by {read_by}, in {dead}: {term}"
            check()
        return term if term is not None and term.holder == survivor else None

    timeout_s = 3 * dead.duration.total_seconds() + 20
    return wait_until(taken_over, timeout_s, what)
