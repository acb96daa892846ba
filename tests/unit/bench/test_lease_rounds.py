"""bench/lease_rounds.py's cluster is at rest and its rounds write nothing: a round over every
lease and one owed a pod's change, on the controller's own adapter over a hand-fed watch cache
whose client refuses every call (a round that wrote, or decided a move, would fail the run)."""

from __future__ import annotations

import asyncio

from support.bench import bench_module


def test_both_ways_run_over_the_same_pool_and_decide_nothing() -> None:
    lease_rounds = bench_module("lease_rounds")
    result = asyncio.run(lease_rounds.size(nodes=12, leases=40, rounds=3, seed=1))
    assert result["leases"] == result["pods"] == 40 and result["rounds_each"] == 3
    assert set(result) >= {"whole", "per_key", "whole_over_per_key"}
