from __future__ import annotations

import pytest
from quota_builders import G, lease, ledger_of, tenant

from gpupool.domain.errors import InvalidQuota


def test_used_borrowed_lent_and_pool() -> None:
    ledger = ledger_of(tenant("a", 10 * G), tenant("b", 10 * G, lend_limit=4 * G))
    assert ledger.book.pool_capacity("research") == 14 * G
    ledger.add(lease("a", 8 * G))
    ledger.add(lease("a", 5 * G, borrowed=True))
    assert ledger.used("a") == 13 * G
    assert ledger.borrowed("a") == 3 * G
    assert ledger.borrowed_marked("a") == 5 * G
    assert ledger.pool_used("research") == 13 * G
    assert ledger.lent("b") == 3 * G
    assert ledger.lent("a") == 0


def test_release_promotes_oldest_borrowed_lease_that_fits() -> None:
    ledger = ledger_of(tenant("a", 10 * G), tenant("b", 10 * G))
    first = lease("a", 8 * G, at=0)
    old = lease("a", 3 * G, at=1, borrowed=True)
    new = lease("a", 3 * G, at=2, borrowed=True)
    for le in (first, old, new):
        ledger.add(le)
    ledger.remove(first.id)
    promoted = ledger.lease(old.id)
    assert promoted is not None and not promoted.borrowed
    still = ledger.lease(new.id)
    assert still is not None and not still.borrowed  # 3 + 3 <= 10: both fit nominal now
    assert ledger.borrowed_marked("a") == 0


def test_ledger_refuses_unknown_and_duplicate() -> None:
    ledger = ledger_of(tenant("a", 10 * G))
    one = lease("a", G)
    ledger.add(one)
    with pytest.raises(InvalidQuota, match="already"):
        ledger.add(one)
    with pytest.raises(InvalidQuota, match="no quota"):
        ledger.add(lease("zz", G))
    with pytest.raises(InvalidQuota, match="not in the ledger"):
        ledger.remove("nope")


def test_update_to_terminal_removes() -> None:
    ledger = ledger_of(tenant("a", 10 * G))
    one = lease("a", G)
    ledger.add(one)
    ledger.update(one.bind(1.0))
    assert ledger.used("a") == G
    ledger.update(one.release(2.0))
    assert ledger.used("a") == 0 and len(ledger) == 0
