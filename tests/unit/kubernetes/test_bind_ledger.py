"""Bind's per-node ledger and keyed locks: the ledger never lacks a lease that may exist, and
binds on one key run one at a time while binds on different keys run together."""

from __future__ import annotations

import asyncio

from gpupool.adapters.extender_http.locks import KeyedLocks
from gpupool.domain.allocations import Slice
from gpupool.domain.units import GiB
from gpupool.state.lease import LeaseRecord, PodRef
from gpupool.state.node_ledger import NodeLedger

NOW = 100.0  # monotonic seconds: the ledger is told the time, it reads no clock


def lease(uid: str, gpu: int = 0, offset: int = 0) -> LeaseRecord:
    return LeaseRecord(
        name=uid,
        namespace="ns",
        tenant="default",
        pod=PodRef("ns", f"p-{uid}", uid),
        node="n1",
        slices=(Slice(gpu, f"GPU-{gpu}", "A100-80GB", offset, 12 * GiB, 0),),
        amount=12 * GiB,
    )


def keys(ledger: NodeLedger) -> set[str]:
    return {x.key for x in ledger.leases()}


def test_a_new_ledger_is_stale_and_a_refreshed_one_is_trusted() -> None:
    ledger = NodeLedger()
    assert ledger.stale(10.0, NOW)
    ledger.refresh([lease("a")], ledger.listing(), NOW)
    assert not ledger.stale(10.0, NOW)
    assert ledger.stale(0.0, NOW)  # max age 0: always re-list (the serial path)
    assert not ledger.stale(10.0, NOW + 9.9) and ledger.stale(10.0, NOW + 10.0)
    assert keys(ledger) == {"ns/a"}


def test_a_create_in_flight_when_the_list_was_sent_survives_the_refresh() -> None:
    """The create finishes while the list is on the wire (outside the node's lock): the list may
    not show it, and dropping it would let the next bind plan onto its bytes."""
    ledger = NodeLedger()
    ledger.refresh([], ledger.listing(), NOW)
    ledger.begin(lease("b"))
    inflight = ledger.listing()  # the list is sent now
    ledger.commit(lease("b"))  # ... the create returns before the list does
    ledger.refresh([lease("a")], inflight, NOW)  # a list served before the create
    assert keys(ledger) == {"ns/a", "ns/b"}
    ledger.refresh([lease("a")], ledger.listing(), NOW)  # a later list is the API server's word
    assert keys(ledger) == {"ns/a"}


def test_a_create_started_during_the_list_survives_the_refresh() -> None:
    ledger = NodeLedger()
    inflight = ledger.listing()
    ledger.begin(lease("c"))
    ledger.refresh([], inflight, NOW)
    assert keys(ledger) == {"ns/c"}


def test_a_failed_create_is_dropped_and_an_unknown_outcome_forces_a_relist() -> None:
    ledger = NodeLedger()
    ledger.refresh([], ledger.listing(), NOW)
    ledger.begin(lease("d"))
    ledger.abort("ns/d", known=True)  # AlreadyExists: ours was never made
    assert keys(ledger) == set() and not ledger.stale(10.0, NOW)
    ledger.begin(lease("e"))
    ledger.abort("ns/e", known=False)  # a timeout: it may exist
    assert keys(ledger) == {"ns/e"}  # still counted
    assert ledger.stale(10.0, NOW)  # and the next bind re-lists


def test_discard_forgets_a_deleted_lease() -> None:
    ledger = NodeLedger()
    ledger.refresh([lease("a"), lease("b")], ledger.listing(), NOW)
    ledger.discard("ns/a")
    assert keys(ledger) == {"ns/b"}


def test_one_key_is_held_by_one_task_at_a_time_and_other_keys_run_together() -> None:
    locks = KeyedLocks()
    log: list[str] = []

    async def hold(key: str, tag: str, gate: asyncio.Event) -> None:
        async with locks.hold(key):
            log.append(f"in {tag}")
            await gate.wait()
            log.append(f"out {tag}")

    async def main() -> None:
        g1, g2, g3 = asyncio.Event(), asyncio.Event(), asyncio.Event()
        t1 = asyncio.ensure_future(hold("n1", "a", g1))
        t2 = asyncio.ensure_future(hold("n1", "b", g2))
        t3 = asyncio.ensure_future(hold("n2", "c", g3))
        for _ in range(5):
            await asyncio.sleep(0)
        # a (n1) and c (n2) are both inside; b waits for a
        assert log == ["in a", "in c"]
        g2.set()
        for _ in range(5):
            await asyncio.sleep(0)
        assert "in b" not in log
        g1.set()
        g3.set()
        await asyncio.gather(t1, t2, t3)
        assert log.index("in b") > log.index("out a")
        assert len(locks) == 0  # nothing kept for keys no one holds

    asyncio.run(main())
