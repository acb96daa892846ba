"""The steps of a defragmentation round (`controllers.defrag.plan`), each on its own: a pool's
condition, the marks released or still in force, a standing notice settled, whether a round is
due, the marks and notices of a round, the cards each pool has marked. `plan_defrag_round` over
them is tested in `test_defrag_plan`."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from test_defrag_plan import T0, _build

from gpupool.adapters.kubernetes.pool import read_pool
from gpupool.adapters.wire.times import format_time
from gpupool.controllers.defrag.plan import (
    marked_cards,
    move_notice,
    plan_one,
    pool_condition,
    round_is_due,
    round_marks,
    rules_of,
    settle_defrag_notice,
    settle_marks,
)
from gpupool.controllers.notices.plan import EvictPod, WithdrawNotice
from gpupool.state.nodes import DefragMark
from gpupool.state.notice import ReclaimNotice
from gpupool.state.pool import PoolObject

FRAGMENTED = [[[(16, 0, True, 5, "c"), (16, 0, True, 5, "c")]], [[(8, 1, True, 5, "c")]]]
SPLIT = [[[(16, 0, True, 5, "c")]], [[(16, 0, True, 5, "c")]]]  # one slice moves to the other


def pool_with(spec: dict[str, Any], status: dict[str, Any] | None = None) -> PoolObject:
    obj: dict[str, Any] = {"metadata": {"name": "a", "generation": 2}, "spec": spec}
    if status is not None:
        obj["status"] = status
    return read_pool(obj)


ENABLED = {"nodeSelector": {"pool": "a"}, "defragThresholdPercent": 5, "defrag": {"enabled": True}}


def test_a_pools_condition_says_enabled_disabled_or_invalid() -> None:
    on = pool_condition(pool_with(ENABLED))
    assert (on.ok, on.reason, on.generation) == (True, "Enabled", 2)
    assert "cards above 5% fragmentation are cleared" in on.message
    off = pool_condition(pool_with({"nodeSelector": {"pool": "a"}}))
    assert (off.ok, off.reason) == (False, "Disabled")
    bad = pool_with({**ENABLED, "defragThresholdPercent": 500})
    assert bad.any_problem is not None
    assert (pool_condition(bad).reason, pool_condition(bad).message) == (
        "InvalidSpec",
        bad.any_problem,
    )


def test_settle_marks_releases_each_kind_and_keeps_the_one_in_force() -> None:
    pool, placement, views, _ = _build(FRAGMENTED, {}, 5, False, None)
    moving = ReclaimNotice(T0 - 10, T0 + 20, "a", "", room="n0")
    noticed = [replace(v, defrag_notice=moving) if v.node == "n0" else v for v in views]
    marks = {
        "n0": DefragMark("a", T0 - 10, T0 + 600, (0,)),  # pods still to move: in force
        "n1": DefragMark("a", T0 - 10, T0 + 600, (0,)),  # nobody moves off it: cleared
        "n2": DefragMark("a", T0 - 700, T0 - 100, (0,)),  # timed out
        "n3": DefragMark("gone", T0 - 10, T0 + 600, (0,)),  # its pool no longer defragments
    }
    releases, standing = settle_marks(marks, {"a": pool}, placement, noticed, T0)
    assert [(r.node, r.kind) for r in releases] == [
        ("n1", "cleared"),
        ("n2", "timeout"),
        ("n3", "disabled"),
    ]
    assert standing == {"n0": marks["n0"]}


def test_a_defrag_notice_is_withdrawn_waits_or_falls_due() -> None:
    _, _, views, _ = _build(FRAGMENTED, {}, 5, False, None)
    pod = next(v for v in views if v.node == "n0")
    assert settle_defrag_notice(pod, {}, {}, T0) is None  # no notice
    notice = ReclaimNotice(T0 - 10, T0 + 20, "a", "ns/large", room="n0")
    noticed = replace(pod, defrag_notice=notice)
    withdrawn = settle_defrag_notice(noticed, {}, {}, T0)
    assert isinstance(withdrawn, WithdrawNotice) and "is over; the pod stays" in withdrawn.message
    standing = {"n0": DefragMark("a", T0 - 10, T0 + 600, (0,))}
    assert settle_defrag_notice(noticed, standing, {}, T0 + 19) is None
    large = next(v for v in views if v.name == "large")
    due = settle_defrag_notice(noticed, standing, {"ns/large": large}, T0 + 20)
    assert isinstance(due, EvictPod)
    assert "moved off node n0 by defragmentation (GpuPool a)" in due.message
    assert "the room is held for pod ns/large" in due.message


def test_a_round_is_due_only_for_an_idle_valid_pool_past_its_interval() -> None:
    assert round_is_due(pool_with(ENABLED), set(), T0)
    assert not round_is_due(pool_with(ENABLED), {"a"}, T0)
    assert not round_is_due(pool_with({"nodeSelector": {"pool": "a"}}), set(), T0)
    spec = {**ENABLED, "defrag": {"enabled": True, "intervalSeconds": 300}}
    recent = pool_with(spec, {"defrag": {"lastRound": format_time(T0 - 100)}})
    assert not round_is_due(recent, set(), T0)
    assert round_is_due(recent, set(), T0 + 200)


def test_a_rounds_marks_and_notices_follow_its_plan() -> None:
    pool, placement, views, budgets = _build(SPLIT, {}, 5, False, None)
    rnd = plan_one(pool, rules_of(pool), placement, views, budgets, set(), None)
    assert rnd.plan.moves and rnd.plan.cleared
    assert pool.defrag is not None
    marks = round_marks(pool, rnd, placement, T0)
    assert {m.node for m in marks} == {node for node, _ in rnd.plan.cleared}
    assert all(m.mark == replace(m.mark, pool="a", since=T0) for m in marks)
    assert all(m.mark.until == T0 + pool.defrag.timeout_s for m in marks)
    by_key = {v.key: v for v in views}
    move = rnd.plan.moves[0]
    notice = move_notice(pool, rnd, move, by_key[move.resident], T0)
    assert notice.pod.key == move.resident and notice.notice.room == move.source_card[0]
    assert notice.notice.evict_at == T0 + pool.defrag.notice_s
    assert notice.message.startswith("defragmentation (GpuPool a) moves this pod off GPU slot")


def test_marked_cards_count_every_pools_cards_in_force() -> None:
    marks = [DefragMark("a", T0, T0 + 1, (0, 1)), DefragMark("b", T0, T0 + 1, (3,))]
    assert marked_cards([pool_with(ENABLED)], marks) == {"a": 2, "b": 1}
    assert marked_cards([pool_with(ENABLED)], []) == {"a": 0}
