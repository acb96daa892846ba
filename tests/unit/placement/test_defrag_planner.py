"""The defragmentation planner: hand-made cards for each rule, and properties over random ones."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from placement_builders import node, share, whole

from gpupool.domain import Request
from gpupool.placement import ClusterSnapshot, Decision, Planner
from gpupool.placement.defrag import (
    DefragPlan,
    DefragRules,
    InvalidDefragMoveLimit,
    InvalidDefragThreshold,
    Resident,
    SkipReason,
    plan_defrag,
)
from gpupool.placement.fragmentation import CommonSizes, snapshot_fragmentation

# Pool traffic: quarter cards and whole cards, equally often.
SIZES = CommonSizes.learn([share("q", 250), whole("w")])


def put(snap: ClusterSnapshot, node_name: str, slot: int, req: Request) -> Decision:
    """Place `req` on one named card (bypassing the policy), as placement would lay it out."""
    i = snap.index[node_name]
    mem = int(snap.gmem_total[i, slot] * (req.gpu_milli or 0) // 1000)
    decision = Decision(
        req,
        i,
        node_name,
        (slot,),
        (mem,),
        (req.gpu_milli or 0,),
        (int(snap.gmem_total[i, slot] - snap.gmem_free[i, slot]),),
        0.0,
    )
    snap.assume(decision)
    return decision


def quarter(name: str, priority: int = 0) -> Request:
    return share(name, 250, priority=priority)


def resident(decision: Decision, **kw: object) -> Resident:
    return Resident(decision.request.name, decision, decision.request.priority, **kw)  # type: ignore[arg-type]


def apply(snap: ClusterSnapshot, plan: DefragPlan) -> None:
    for move in plan.moves:
        snap.forget(move.source)
        snap.assume(move.target)


def two_half_cards() -> tuple[ClusterSnapshot, list[Resident]]:
    """Card n0/0 holds one quarter slice (priority 0), card n1/0 two (priority 1 and 2); the
    other cards are empty. Quarter cards fit everywhere, whole cards only on empty cards."""
    snap = ClusterSnapshot([node("n0", gpus=2), node("n1", gpus=2)])
    placed = [
        put(snap, "n0", 0, quarter("low", 0)),
        put(snap, "n1", 0, quarter("mid", 1)),
        put(snap, "n1", 0, quarter("high", 2)),
    ]
    return snap, [resident(d) for d in placed]


def test_the_lowest_priority_card_is_cleared_into_the_other_ones_hole() -> None:
    snap, residents = two_half_cards()
    before = snap.state_key()
    plan = plan_defrag(snap, residents, SIZES, DefragRules(threshold_pct=20))
    # n0/0: 750 of 1000 free and only quarter cards use it: 0.5 * 0.75 = 37.5%.
    # n1/0: 500 free: 0.5 * 0.5 = 25%. Both are over 20%; n0/0 holds the lowest priority.
    assert [(m.resident, m.source_card, m.target_card) for m in plan.moves] == [
        ("low", ("n0", 0), ("n1", 0))
    ]
    assert plan.cleared == (("n0", 0),)
    assert plan.card_before == {("n0", 0): 0.375, ("n1", 0): 0.25}
    assert plan.card_after == {("n0", 0): 0.0, ("n1", 0): pytest.approx(0.125)}
    assert plan.pool_before == pytest.approx((0.375 + 0.25) / 4)
    assert plan.pool_after == pytest.approx(0.125 / 4)
    assert snap.state_key() == before  # every what-if undone


def test_a_card_is_fixed_with_the_fewest_moves_lowest_priority_first() -> None:
    """Sizes quarter and half: n0/0 holds three quarters (12.5% fragmented: a half does not
    fit), n1/0 one. Moving one quarter (the lowest priority) off n0/0 lets a half fit there:
    one move, and n0/0 keeps its other two slices."""
    sizes = CommonSizes.learn([share("q", 250), share("h", 500)])
    snap = ClusterSnapshot([node("n0", gpus=1), node("n1", gpus=1)])
    placed = [
        put(snap, "n0", 0, quarter("mid", 1)),
        put(snap, "n0", 0, quarter("low", 0)),
        put(snap, "n0", 0, quarter("high", 2)),
        put(snap, "n1", 0, quarter("other", 5)),
    ]
    plan = plan_defrag(snap, [resident(d) for d in placed], sizes, DefragRules(10))
    assert [(m.resident, m.target_card) for m in plan.moves] == [("low", ("n1", 0))]
    assert plan.cleared == (("n0", 0),)
    assert plan.card_after[("n0", 0)] == 0.0 and plan.card_before[("n0", 0)] > 0.1


def test_an_exclusive_slice_stays_and_the_others_move_when_that_is_enough() -> None:
    sizes = CommonSizes.learn([share("q", 250), share("h", 500)])
    snap = ClusterSnapshot([node("n0", gpus=1), node("n1", gpus=1)])
    placed = [
        put(snap, "n0", 0, quarter("solo", 0)),
        put(snap, "n0", 0, quarter("low", 1)),
        put(snap, "n0", 0, quarter("high", 2)),
        put(snap, "n1", 0, quarter("other", 5)),
    ]
    residents = [resident(placed[0], exclusive=True), *(resident(d) for d in placed[1:])]
    plan = plan_defrag(snap, residents, sizes, DefragRules(10))
    assert [m.resident for m in plan.moves] == ["low"]


def test_a_large_pod_fits_once_the_plan_is_applied() -> None:
    snap = ClusterSnapshot([node("n0", gpus=1), node("n1", gpus=1)])
    res = [resident(put(snap, "n0", 0, quarter(f"a{k}"))) for k in range(2)]
    res += [resident(put(snap, "n1", 0, quarter(f"b{k}", 1))) for k in range(2)]
    big = whole("big")
    assert not isinstance(Planner("binpack").plan(snap, big), Decision)
    plan = plan_defrag(snap, res, SIZES, DefragRules(threshold_pct=10))
    assert {m.resident for m in plan.moves} == {"a0", "a1"}
    apply(snap, plan)
    assert isinstance(Planner("binpack").plan(snap, big), Decision)


@pytest.mark.parametrize(
    ("flags", "reason"),
    [
        ({"exclusive": True}, SkipReason.EXCLUSIVE),
        ({"has_owner": False}, SkipReason.NO_OWNER),
        ({"disruption_budget": "web"}, SkipReason.DISRUPTION_BUDGET),
    ],
)
def test_a_protected_slice_keeps_its_card_and_the_next_card_is_cleared(
    flags: dict[str, object], reason: SkipReason
) -> None:
    snap, residents = two_half_cards()
    residents[0] = resident(residents[0].decision, **flags)
    plan = plan_defrag(snap, residents, SIZES, DefragRules(20), budgets={"web": 0})
    assert all(m.resident != "low" for m in plan.moves)
    assert (reason, "low") in {(s.reason, s.resident) for s in plan.skipped}
    # n1/0 is cleared instead: its two slices go to n0/0's hole, lowest priority first.
    assert [m.resident for m in plan.moves] == ["mid", "high"]
    assert plan.cleared == (("n1", 0),)


def test_a_budget_that_allows_the_disruptions_lets_the_move_happen() -> None:
    snap, residents = two_half_cards()
    residents[0] = resident(residents[0].decision, disruption_budget="web")
    plan = plan_defrag(snap, residents, SIZES, DefragRules(20), budgets={"web": 1})
    assert [m.resident for m in plan.moves] == ["low"]


def test_orphans_move_when_told_to() -> None:
    snap, residents = two_half_cards()
    residents[0] = resident(residents[0].decision, has_owner=False)
    plan = plan_defrag(snap, residents, SIZES, DefragRules(20, move_orphans=True))
    assert [m.resident for m in plan.moves] == ["low"]


def test_the_move_bound_skips_a_card_whose_clearing_would_pass_it() -> None:
    snap, residents = two_half_cards()
    residents[0] = resident(residents[0].decision, exclusive=True)
    plan = plan_defrag(snap, residents, SIZES, DefragRules(20, max_moves=1))
    assert not plan.moves
    assert {s.reason for s in plan.skipped} == {SkipReason.EXCLUSIVE, SkipReason.MOVE_LIMIT}


def test_no_target_within_the_threshold_means_no_move() -> None:
    # One quarter slice on each of two cards: moving either one onto the other would leave
    # that card at 0.5 * 0.5 = 25%, above a 20% threshold... which is below its 37.5% before:
    # allowed. With the threshold at 40% neither card is a source at all.
    snap = ClusterSnapshot([node("n0", gpus=1), node("n1", gpus=1)])
    res = [resident(put(snap, n, 0, quarter(n))) for n in ("n0", "n1")]
    assert len(plan_defrag(snap, res, SIZES, DefragRules(20)).moves) == 1
    assert not plan_defrag(snap, res, SIZES, DefragRules(40)).moves
    # A slice with no room anywhere else: the card is skipped with the slice named.
    snap = ClusterSnapshot([node("n0", gpus=1), node("n1", gpus=1)])
    res = [resident(put(snap, "n0", 0, share("big", 700)))]
    put(snap, "n1", 0, share("other", 700))
    plan = plan_defrag(snap, res, CommonSizes.learn([whole("w")]), DefragRules(10))
    assert not plan.moves
    assert {(s.node, s.reason, s.resident) for s in plan.skipped} == {
        ("n0", SkipReason.NO_TARGET, "big"),
        ("n1", SkipReason.STILL_FRAGMENTED, None),  # what holds it is not ours to move
    }


def test_targets_obey_the_placement_filters_cordons_and_node_cpu() -> None:
    # n1/0's hole would take `low`, but n1 is cordoned: the plan clears nothing onto it.
    snap, residents = two_half_cards()
    snap.set_condition("n1", "node is cordoned")
    plan = plan_defrag(snap, residents, SIZES, DefragRules(20))
    assert all(m.target.node != "n1" for m in plan.moves)
    assert ("n0", SkipReason.NO_TARGET, "low") in {
        (s.node, s.reason, s.resident) for s in plan.skipped
    }
    # Without CPU to spare on n1, neither may `low` go there.
    snap, residents = two_half_cards()
    cpu_hog = Request("hog", cpu_milli=int(snap.cpu_free[snap.index["n1"]]))
    snap.assume(Decision(cpu_hog, snap.index["n1"], "n1", (), (), (), (), 0.0))
    plan = plan_defrag(snap, residents, SIZES, DefragRules(20))
    assert all(m.target.node != "n1" for m in plan.moves)


def test_an_empty_card_is_never_a_target() -> None:
    # Two quarter slices leave 500 free on n0/0, too little for the pool's 600-milli requests
    # (50%). Each alone on one of n1's empty cards would leave 750 free, enough (0%): within
    # the threshold, but it would only move the hole and use up whole cards.
    snap = ClusterSnapshot([node("n0", gpus=1), node("n1", gpus=2)])
    res = [resident(put(snap, "n0", 0, quarter(f"q{k}"))) for k in range(2)]
    sizes = CommonSizes.learn([share("s", 600)])
    assert snapshot_fragmentation(snap, sizes)[0, 0] == pytest.approx(0.5)
    plan = plan_defrag(snap, res, sizes, DefragRules(threshold_pct=10))
    assert not plan.moves
    assert [(s.reason, s.resident) for s in plan.skipped] == [(SkipReason.NO_TARGET, "q0")]


@pytest.mark.parametrize("bad", [-1, 100.5, float("nan"), "20"])
def test_a_threshold_outside_0_to_100_is_a_typed_error(bad: object) -> None:
    with pytest.raises(InvalidDefragThreshold, match="percentage of a card's memory from 0 to 100"):
        DefragRules(threshold_pct=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -3, 1.5, True])
def test_a_bad_move_bound_is_a_typed_error(bad: object) -> None:
    with pytest.raises(InvalidDefragMoveLimit, match="1 or more"):
        DefragRules(threshold_pct=10, max_moves=bad)  # type: ignore[arg-type]


# ---- properties -----------------------------------------------------------------------------


@st.composite
def fragmented_pools(draw: st.DrawFn) -> tuple[ClusterSnapshot, list[Resident], dict[str, int]]:
    """A few nodes, slices placed at random (spread, so holes are everywhere), random flags."""
    nodes = [
        node(f"n{i}", gpus=draw(st.integers(1, 4)), cpu=draw(st.integers(4, 32)) * 1000)
        for i in range(draw(st.integers(1, 4)))
    ]
    snap = ClusterSnapshot(nodes)
    planner = Planner("random", seed=draw(st.integers(0, 1000)))
    residents: list[Resident] = []
    for k in range(draw(st.integers(0, 14))):
        req = Request(
            f"r{k}",
            cpu_milli=draw(st.sampled_from([0, 1000, 4000])),
            gpu_count=1,
            gpu_milli=draw(st.sampled_from([100, 250, 300, 500, 700, 1000])),
            priority=draw(st.integers(0, 3)),
        )
        decision = planner.plan(snap, req)
        if not isinstance(decision, Decision):
            continue
        snap.assume(decision)
        residents.append(
            Resident(
                req.name,
                decision,
                req.priority,
                exclusive=draw(st.booleans()) and draw(st.booleans()),
                has_owner=draw(st.booleans()) or draw(st.booleans()),
                disruption_budget=draw(st.sampled_from([None, None, "a", "b"])),
            )
        )
    budgets = {"a": draw(st.integers(0, 3)), "b": draw(st.integers(0, 3))}
    return snap, residents, budgets


@settings(max_examples=150, deadline=None)
@given(
    pool=fragmented_pools(),
    threshold=st.sampled_from([0, 5, 10, 20, 40, 100]),
    bound=st.one_of(st.none(), st.integers(1, 6)),
    orphans=st.booleans(),
    sizes=st.sampled_from(
        [
            SIZES,
            CommonSizes.learn([share("a", 300), share("b", 500), whole("w"), whole("w")]),
            CommonSizes.learn([share("a", 100)]),
        ]
    ),
)
def test_plan_properties(
    pool: tuple[ClusterSnapshot, list[Resident], dict[str, int]],
    threshold: int,
    bound: int | None,
    orphans: bool,
    sizes: CommonSizes,
) -> None:
    snap, residents, budgets = pool
    rules = DefragRules(threshold, max_moves=bound, move_orphans=orphans)
    state = snap.state_key()
    before = snapshot_fragmentation(snap, sizes)
    plan = plan_defrag(snap, residents, sizes, rules, budgets)
    assert snap.state_key() == state  # the snapshot is left as given

    by_id = {r.id: r for r in residents}
    moved = [by_id[m.resident] for m in plan.moves]
    # Never an exclusive pod, an orphan unless told, or more than a budget allows, or the bound.
    assert not any(r.exclusive for r in moved)
    assert orphans or all(r.has_owner for r in moved)
    used = Counter(r.disruption_budget for r in moved if r.disruption_budget is not None)
    assert all(used[name] <= budgets[name] for name in used)
    assert bound is None or len(plan.moves) <= bound

    # No slice moves onto a card that was empty.
    empty = snap.fully_free()
    assert not any(empty[m.target.node_index, m.target.cards[0]] for m in plan.moves)
    # Applied in order, every move is feasible (assume refuses over-commit) and no card ends
    # over capacity.
    apply(snap, plan)
    assert (snap.gmem_free >= 0).all() and (snap.comp_free >= 0).all()
    assert (snap.cpu_free >= 0).all()
    after = snapshot_fragmentation(snap, sizes)
    # No card's fragmentation rises above the threshold (one over it already may only fall).
    limit = np.maximum(rules.threshold, before) + 1e-9
    assert (after <= limit).all()
    # Priorities: slices leave a source lowest priority first, until the card is at or under
    # the threshold; cards are fixed in order of the highest priority among their movable
    # slices.
    per_card: dict[tuple[str, int], list[int]] = {}
    for m in plan.moves:
        per_card.setdefault(m.source_card, []).append(m.priority)
    for card, priorities in per_card.items():
        assert priorities == sorted(priorities)
        assert after[snap.index[card[0]], card[1]] <= rules.threshold + 1e-9
    assert list(per_card) == list(plan.cleared)

    def movable_peak(card: tuple[str, int]) -> int:
        return max(
            r.priority
            for r in residents
            if (r.decision.node, r.decision.cards[0]) == card
            and len(r.decision.cards) == 1
            and not r.exclusive
            and (orphans or r.has_owner)
        )

    peaks = [movable_peak(c) for c in plan.cleared]
    assert peaks == sorted(peaks)
