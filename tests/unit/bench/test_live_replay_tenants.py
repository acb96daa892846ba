"""bench/live_replay.py --tenants: the tenants the pods are dealt to, and a count that cannot
be is refused with the flag to fix."""

from __future__ import annotations

import pytest
from support.bench import bench_module

live_replay = bench_module("live_replay")


def test_one_tenant_keeps_its_name_and_several_are_numbered_in_turn() -> None:
    assert live_replay.tenant_names(1) == ["replay"]
    assert live_replay.tenant_names(3) == ["replay-00", "replay-01", "replay-02"]


def test_no_tenant_is_refused_naming_the_flag() -> None:
    with pytest.raises(SystemExit, match="--tenants must be 1 or more; got 0"):
        live_replay.tenant_names(0)
