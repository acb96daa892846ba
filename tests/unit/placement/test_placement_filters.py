"""Every filter, with the specific reason it gives."""

from __future__ import annotations

import pytest
from placement_builders import cpu_only, mixed_node, node, occupy, place, share, slice_gib, whole

from gpupool.domain import GiB, Gpu, Node, Request
from gpupool.domain.errors import InvalidNode
from gpupool.placement import ClusterSnapshot, Planner, Reason, Unschedulable, explain, feasibility


def reason_of(snap: ClusterSnapshot, req: Request, name: str) -> tuple[Reason, str]:
    feas = feasibility(snap, req)
    i = snap.index[name]
    return Reason(int(feas.reason[i])), explain(snap, req, feas, i)


def test_three_12gi_slices_share_one_80gb_card_with_disjoint_offsets() -> None:
    snap = ClusterSnapshot([node(gpus=1)])
    decisions = [place(snap, slice_gib(f"p{i}", 12)) for i in range(3)]
    assert {d.cards for d in decisions} == {(0,)}
    spans = sorted((d.offsets[0], d.offsets[0] + d.mem_bytes[0]) for d in decisions)
    assert spans == [(0, 12 * GiB), (12 * GiB, 24 * GiB), (24 * GiB, 36 * GiB)]


def test_60gi_does_not_fit_on_four_cards_with_50gi_free_each() -> None:
    snap = ClusterSnapshot([node("busy", gpus=4)])
    for card in range(4):
        occupy(snap, "busy", card, 30)  # 80Gi cards: 50Gi left on each
    why, text = reason_of(snap, slice_gib("big", 60), "busy")
    assert why is Reason.GPU_MEMORY
    assert text == "insufficient memory on every card (largest free 50Gi < 60Gi)"


@pytest.mark.parametrize(
    ("nodes", "req", "reason", "text"),
    [
        (
            [node("t4", model="T4")],
            slice_gib("m", 4, models=("A100-80GB", "H800")),
            Reason.MODEL,
            "gpu model T4 not in A100-80GB|H800",
        ),
        ([node("cpu", gpus=0)], whole(), Reason.NO_GPUS, "node has no GPUs"),
        (
            [node("two", gpus=2)],
            whole(gpus=4),
            Reason.TOO_FEW_GPUS,
            "node has 2 matching GPUs; the request needs 4",
        ),
        (
            [node("small", model="RTX-3090")],
            slice_gib("m", 40),
            Reason.CARD_TOO_SMALL,
            "every card is smaller than the request (24Gi < 40Gi)",
        ),
        (
            [node("g2", model="G2")],
            slice_gib("m", 4),
            Reason.MEMORY_UNKNOWN,
            "memory size of G2 cards is unknown; ask for a GPU share instead of bytes",
        ),
        (
            [node("lowcpu", cpu=2000)],
            share(cpu=4000),
            Reason.CPU,
            "insufficient cpu (free 2000m < 4000m)",
        ),
        (
            [node("lowmem", mem=1024)],
            Request("m", memory_mib=4096, gpu_count=1, gpu_milli=100),
            Reason.MEMORY,
            "insufficient memory (free 1024Mi < 4096Mi)",
        ),
        (
            [node("cpuonly", cpu=1000)],
            cpu_only(cpu=4000),
            Reason.CPU,
            "insufficient cpu (free 1000m < 4000m)",
        ),
    ],
)
def test_static_reasons(nodes: list, req: Request, reason: Reason, text: str) -> None:  # type: ignore[type-arg]
    snap = ClusterSnapshot(nodes)
    got_reason, got_text = reason_of(snap, req, nodes[0].name)
    assert (got_reason, got_text) == (reason, text)


def test_whole_cards_need_fully_free_cards() -> None:
    snap = ClusterSnapshot([node("n", gpus=2)])
    place(snap, share("s", 100))
    why, text = reason_of(snap, whole(gpus=2), "n")
    assert why is Reason.WHOLE_CARDS and text == "needs 2 whole free GPUs; 1 free"


def test_compute_cap_is_a_separate_dimension() -> None:
    snap = ClusterSnapshot([node("n", gpus=1)])
    place(snap, slice_gib("a", 8, compute=80))
    why, text = reason_of(snap, slice_gib("b", 8, compute=30), "n")
    assert why is Reason.GPU_COMPUTE
    assert text == (
        "insufficient compute on every card with enough memory (largest free 20% < 30%)"
    )
    assert reason_of(snap, slice_gib("c", 8, compute=20), "n")[0] is Reason.FITS


def test_share_reason_for_fractional_requests() -> None:
    snap = ClusterSnapshot([node("n", gpus=1)])
    place(snap, share("a", 700))
    assert reason_of(snap, share("b", 400), "n")[1] == (
        "insufficient GPU share on every card (largest free 300m < 400m)"
    )


def test_node_conditions_and_unhealthy_cards() -> None:
    snap = ClusterSnapshot([node("a", gpus=1), node("b", gpus=1)])
    snap.set_condition("a", "node suspect: no heartbeat for 95s")
    snap.set_card_health("b", 0, False)
    assert reason_of(snap, share(), "a") == (Reason.CONDITION, "node suspect: no heartbeat for 95s")
    assert reason_of(snap, share(), "b") == (Reason.UNHEALTHY, "too few healthy GPUs (need 1)")


def test_models_filter_per_card_on_mixed_nodes() -> None:
    snap = ClusterSnapshot([mixed_node("mix", ["T4", "A100-80GB"])])
    decision = place(snap, share("p", 500, models=("A100-80GB",)))
    assert decision.cards == (1,)


def test_verdict_counts_reasons_and_knows_when_preemption_cannot_help() -> None:
    snap = ClusterSnapshot([node("a", gpus=2), node("b", gpus=2, model="T4")])
    result = Planner("binpack").plan(snap, whole(gpus=4))
    assert isinstance(result, Unschedulable)
    assert result.unresolvable
    assert result.message == "0/2 nodes can take 'w': 2 too few GPUs"
    place(snap, whole("x", gpus=2))
    later = Planner("binpack").plan(snap, whole(gpus=2, models=("A100-80GB",)))
    assert isinstance(later, Unschedulable) and not later.unresolvable


def test_failed_nodes_map_names_every_rejected_node() -> None:
    snap = ClusterSnapshot([node("ok"), node("t4", model="T4"), node("cpu", gpus=0)])
    req = slice_gib("m", 12, models=("A100-80GB",))
    feas = feasibility(snap, req)
    assert Planner.failed_nodes(snap, req, feas) == {
        "t4": "gpu model T4 not in A100-80GB",
        "cpu": "node has no GPUs",
    }


def test_a_card_takes_no_more_pods_than_its_share_count_and_the_reason_names_it() -> None:
    snap = ClusterSnapshot([node("one", gpus=1)])  # 10 shares per card by default
    placed = [place(snap, slice_gib(f"p{i}", 1)) for i in range(10)]
    assert {d.cards for d in placed} == {(0,)}
    why, text = reason_of(snap, slice_gib("p10", 1), "one")
    assert why is Reason.SHARES
    assert "share count" in text and "10 per card" in text
    result = Planner("binpack").plan(snap, slice_gib("p10", 1))
    assert isinstance(result, Unschedulable)
    assert "share count" in result.message
    snap.forget(placed[0])  # one pod ends: its share is free again
    assert reason_of(snap, slice_gib("p10", 1), "one")[0] is Reason.FITS


def test_the_share_count_comes_from_the_card_and_binpack_spills_to_the_next_card() -> None:
    gpus = tuple(Gpu(index=i, model="A100-80GB", uuid=f"c{i}", shares=2) for i in range(2))
    snap = ClusterSnapshot([Node(name="two", cpu_milli=64_000, memory_mib=1 << 19, gpus=gpus)])
    cards = [place(snap, share(f"s{i}", 100)).cards for i in range(4)]
    assert cards == [(0,), (0,), (1,), (1,)]
    why, text = reason_of(snap, share("s4", 100), "two")
    assert why is Reason.SHARES and "2 per card" in text


def test_assume_refuses_a_card_at_its_share_count() -> None:
    gpus = (Gpu(index=0, model="A100-80GB", uuid="c0", shares=1),)
    snap = ClusterSnapshot([Node(name="n", cpu_milli=64_000, memory_mib=1 << 19, gpus=gpus)])
    occupy(snap, "n", 0, 1)
    with pytest.raises(InvalidNode, match="share count"):
        occupy(snap, "n", 0, 1)


def test_a_share_count_below_one_is_refused() -> None:
    with pytest.raises(InvalidNode, match="share count must be 1 or more"):
        Gpu(index=0, model="A100-80GB", shares=0)


def test_memoised_reasons_follow_the_node_as_it_changes() -> None:
    # explain and the checks on the cards alone are memoised on the snapshot; each must move
    # with the node: a placement, a forget, a cordon, a card's health
    snap = ClusterSnapshot([node("n", gpus=1)])
    first = place(snap, share("a", 700))
    assert reason_of(snap, share("b", 400), "n")[1].endswith("(largest free 300m < 400m)")
    second = place(snap, share("c", 200))
    assert reason_of(snap, share("b", 400), "n")[1].endswith("(largest free 100m < 400m)")
    snap.forget(second)
    snap.forget(first)
    assert reason_of(snap, share("b", 400), "n") == (Reason.FITS, "")
    snap.set_condition("n", "node is cordoned")
    assert reason_of(snap, share("b", 400), "n") == (Reason.CONDITION, "node is cordoned")
    snap.set_condition("n", None)
    snap.set_card_health("n", 0, False)
    assert reason_of(snap, share("b", 400), "n")[0] is Reason.UNHEALTHY
    snap.set_card_health("n", 0, True)
    assert reason_of(snap, share("b", 400), "n")[0] is Reason.FITS


def test_closed_cards_refuse_new_slices_until_they_open_again() -> None:
    snap = ClusterSnapshot([node("n", gpus=2), node("m", gpus=1)])
    assert reason_of(snap, share("p", 500), "n")[0] is Reason.FITS
    snap.set_cards_closed("n", [0], "defragmentation round r1")
    assert reason_of(snap, share("p", 500), "n")[0] is Reason.FITS  # card 1 still open
    assert reason_of(snap, whole("w", gpus=2), "n")[0] is Reason.DEFRAG
    snap.set_cards_closed("n", [0, 1], "defragmentation round r1")
    assert reason_of(snap, share("p", 500), "n")[0] is Reason.DEFRAG
    assert reason_of(snap, share("p", 500), "m")[0] is Reason.FITS
    snap.set_cards_closed("n", [], None)  # all open: nothing is closed anywhere
    assert not snap.any_closed
    assert reason_of(snap, whole("w", gpus=2), "n")[0] is Reason.FITS
