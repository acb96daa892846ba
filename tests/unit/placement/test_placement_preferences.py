"""Soft model preferences: prefer raises, avoid lowers, by half the policy's range; never filter."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from placement_builders import mixed_node, node, occupy, share, slice_gib, whole

from gpupool.domain import Request
from gpupool.placement import POLICIES, ClusterSnapshot, Decision, Planner, TargetWorkload
from gpupool.placement.context import PlanContext
from gpupool.placement.preference import AVOID_SHARE, PREFER_SHARE

WORKLOAD = TargetWorkload.from_requests([share(f"s{i}", 250 * (1 + i % 4)) for i in range(8)])


def planner(policy: str) -> Planner:
    return Planner(policy, WORKLOAD, seed=7)


def mixed_pool() -> ClusterSnapshot:
    """Two empty nodes of two models, the A100 node first (it wins ties)."""
    return ClusterSnapshot([node("a100", gpus=4), node("t4", gpus=4, model="T4")])


def chosen(snap: ClusterSnapshot, req: Request, policy: str) -> str:
    result = planner(policy).plan(snap, req)
    assert isinstance(result, Decision), result
    return result.node


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_prefer_and_avoid_decide_between_models_under_every_policy(policy: str) -> None:
    # Preferring one model and avoiding the other moves them a whole range apart: no policy's
    # own difference between two empty nodes can outweigh that, random's included.
    for wanted, other in (("A100-80GB", "T4"), ("T4", "A100-80GB")):
        req = share("p", 250, preferred_models=(wanted,), avoided_models=(other,))
        assert chosen(mixed_pool(), req, policy) == {"A100-80GB": "a100", "T4": "t4"}[wanted]


@pytest.mark.parametrize("policy", sorted(set(POLICIES) - {"random"}))
@pytest.mark.parametrize("kind", ["prefer", "avoid"])
def test_either_preference_alone_changes_the_choice(policy: str, kind: str) -> None:
    plain = share("p", 250)
    first = chosen(mixed_pool(), plain, policy)
    assert first == "a100"  # equal empty nodes: the tie goes to the first
    if kind == "prefer":
        req = replace(plain, preferred_models=("T4",))
    else:
        req = replace(plain, avoided_models=("A100-80GB",))
    assert chosen(mixed_pool(), req, policy) == "t4"


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_scores_move_by_the_documented_share_of_the_policys_range(policy: str) -> None:
    snap = mixed_pool()
    occupy(snap, "a100", 0, 30)
    plain = slice_gib("p", 4)
    base_planner, pref_planner = planner(policy), planner(policy)
    _, rows, base = base_planner.scores(snap, plain)
    req = replace(plain, preferred_models=("T4",), avoided_models=("A100-80GB",))
    _, pref_rows, moved = pref_planner.scores(snap, req)
    assert list(rows) == list(pref_rows) == [0, 1]
    scale = base_planner.policy.scale
    if policy != "random":  # random draws anew on every call
        assert moved[1] - base[1] == pytest.approx(PREFER_SHARE * scale)
        assert moved[0] - base[0] == pytest.approx(-AVOID_SHARE * scale)


def test_no_preference_leaves_the_policys_scores_untouched() -> None:
    snap = mixed_pool()
    occupy(snap, "t4", 1, 5)
    req = share("p", 300)
    for policy in ("gpupool", "fgd", "binpack", "best-fit", "gpu-packing"):
        feas, rows, scores = planner(policy).scores(snap, req)
        own = planner(policy).policy.score(PlanContext(snap, req, feas, rows))
        assert np.array_equal(scores, own)


def test_a_preference_never_makes_a_node_infeasible() -> None:
    # Avoiding the only model there is: the pod is still placed.
    snap = ClusterSnapshot([node("t4-a", gpus=2, model="T4"), node("t4-b", gpus=2, model="T4")])
    req = share("p", 500, avoided_models=("T4",))
    feas_plain, rows_plain, _ = planner("gpupool").scores(snap, share("p", 500))
    feas, rows, _ = planner("gpupool").scores(snap, req)
    assert list(rows) == list(rows_plain) == [0, 1]
    assert np.array_equal(feas.reason, feas_plain.reason)
    assert chosen(snap, req, "gpupool") in ("t4-a", "t4-b")


def test_a_full_preferred_node_sends_the_pod_elsewhere() -> None:
    snap = mixed_pool()
    for card in range(4):
        occupy(snap, "t4", card, 15)  # every T4 card full
    req = slice_gib("p", 4, preferred_models=("T4",))
    assert chosen(snap, req, "gpupool") == "a100"


def test_the_preference_is_soft_a_much_better_node_still_wins() -> None:
    # binpack: the A100 node 90% used after placing, the T4 node 6% (difference 0.84 of its
    # 1.0 range): +0.5 for the preferred T4 is not enough; preferring and avoiding (1.0) is.
    snap = mixed_pool()
    for card in range(3):
        occupy(snap, "a100", card, 80)
    occupy(snap, "a100", 3, 48)
    req = slice_gib("p", 1, preferred_models=("T4",))
    assert chosen(snap, req, "binpack") == "a100"
    both = replace(req, avoided_models=("A100-80GB",))
    assert chosen(snap, both, "binpack") == "t4"


def test_on_a_node_of_two_models_the_cards_taken_count_in_proportion() -> None:
    snap = ClusterSnapshot(
        [mixed_node("mixed", ["T4", "T4", "A100-80GB", "A100-80GB"]), node("a100", gpus=4)]
    )
    req = whole("w", gpus=4, preferred_models=("T4",))
    base = planner("best-fit").scores(snap, whole("w", gpus=4))[2]
    moved = planner("best-fit").scores(snap, req)[2]
    # the mixed node gives two T4s of four cards: half the bonus; the A100 node none
    assert moved[0] - base[0] == pytest.approx(0.5 * PREFER_SHARE * 100)
    assert moved[1] == base[1]


def test_preferences_combine_with_a_hard_model_list() -> None:
    snap = ClusterSnapshot(
        [node("a100", gpus=2), node("h100", gpus=2, model="H100"), node("t4", gpus=2, model="T4")]
    )
    req = share("p", 250, models=("A100-80GB", "H100"), preferred_models=("T4", "H100"))
    # T4 is preferred but not allowed: the preference picks H100 among the allowed
    assert chosen(snap, req, "gpupool") == "h100"
