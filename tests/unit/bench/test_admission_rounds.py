"""bench/admission_rounds.py's pool is at rest for the admission round: after the first round
(the quotas' status, folded back into the cache) its rounds admit nothing and write nothing,
with the borrowed marks and the metering's core leases kept and made afresh alike."""

from __future__ import annotations

import asyncio

from support.bench import bench_module


def test_both_variants_admit_nothing_and_write_nothing_at_rest() -> None:
    admission_rounds = bench_module("admission_rounds")
    result = asyncio.run(admission_rounds.size(nodes=12, pods=40, rounds=3, seed=1))
    assert result["pods"] == 40 and result["writes_in_measured_rounds"] == 0
    assert set(result) >= {"kept_alone", "kept", "afresh", "afresh_over_kept", "one_tenant_kept"}
