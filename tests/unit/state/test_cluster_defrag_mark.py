"""A defragmentation mark on a GpuNode closes its cards to new slices in the extender's cache:
the placement filters refuse them with the mark's reason, the node's other cards stay open, a
removed mark reopens them, and an unreadable mark closes nothing."""

from __future__ import annotations

from typing import Any

from gpupool.adapters.kubernetes.node import read_gpu_node, read_node
from gpupool.adapters.wire.defrag_mark import mark_annotation, parse_mark
from gpupool.domain.requests import Request
from gpupool.placement.filters import Reason, explain, feasibility
from gpupool.state.cluster import ClusterCache
from gpupool.state.nodes import DefragMark

GiB = 2**30


def node() -> dict[str, Any]:
    return {
        "metadata": {"name": "n1", "labels": {}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def gpunode(mark: str | None, cards: int = 2) -> dict[str, Any]:
    devices = [
        {
            "index": i,
            "model": "A100-80GB",
            "uuid": f"GPU-n1-{i}",
            "memoryBytes": 80 * GiB,
            "allocatableBytes": 72 * GiB,
        }
        for i in range(cards)
    ]
    meta: dict[str, Any] = {"name": "n1"}
    if mark is not None:
        meta["annotations"] = {"gpupool.io/defrag": mark}
    return {"metadata": meta, "status": {"devices": devices}}


REQ = Request(name="p", gpu_count=1, gpu_memory_bytes=8 * GiB)
WHOLE = Request(name="w", gpu_count=2)


def cache_with(mark: str | None) -> ClusterCache:
    cache = ClusterCache()
    cache.rebuild([read_node(node())], [read_gpu_node(gpunode(mark))], [])
    return cache


def test_a_marked_card_takes_no_new_slice_and_the_other_card_does() -> None:
    mark = mark_annotation(DefragMark("pool-a", 0.0, 600.0, (0,)))
    snap = cache_with(mark).snapshot()
    feas = feasibility(snap, REQ)
    assert feas.card_fit[0].tolist() == [False, True]
    assert feas.reason[0] == Reason.FITS
    whole = feasibility(snap, WHOLE)  # two whole cards: one is closed
    assert whole.reason[0] == Reason.DEFRAG
    why = explain(snap, WHOLE, whole, 0)
    assert "GPU 0 being cleared by defragmentation (GpuPool pool-a)" in why


def test_every_card_marked_refuses_the_node_with_the_marks_reason() -> None:
    mark = mark_annotation(DefragMark("pool-a", 0.0, 600.0, (0, 1)))
    snap = cache_with(mark).snapshot()
    feas = feasibility(snap, REQ)
    assert feas.reason[0] == Reason.DEFRAG and not feas.card_fit[0].any()
    assert "being cleared by defragmentation" in explain(snap, REQ, feas, 0)


def test_removing_the_mark_reopens_the_cards() -> None:
    cache = cache_with(mark_annotation(DefragMark("pool-a", 0.0, 600.0, (0, 1))))
    cache.snapshot()
    cache.set_gpunode(read_gpu_node(gpunode(None)))
    feas = feasibility(cache.snapshot(), REQ)
    assert feas.reason[0] == Reason.FITS and feas.card_fit[0].all()


def test_an_unreadable_mark_closes_nothing() -> None:
    assert parse_mark("{not json") is None
    assert parse_mark('{"since": "x", "until": "y", "gpus": [0]}') is None
    assert (
        parse_mark(
            '{"since": "2026-01-01T00:00:00Z", "until": "2026-01-01T00:10:00Z", "gpus": ["0"]}'
        )
        is None
    )
    feas = feasibility(cache_with("{not json").snapshot(), REQ)
    assert feas.card_fit[0].all()


def test_the_mark_round_trips() -> None:
    mark = DefragMark("p", 1_800_000_000.0, 1_800_000_600.0, (1, 3))
    assert parse_mark(mark_annotation(mark)) == mark
