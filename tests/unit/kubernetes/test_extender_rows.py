"""The extender's memo of node rows per node list: it never answers from a stale snapshot."""

from __future__ import annotations

import json

from support.builders import node_json

from gpupool.adapters.extender_http.filter import filter_nodes
from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod
from gpupool.adapters.extender_http.service import Extender
from gpupool.adapters.extender_http.wire import ExtenderArgs, ExtenderFilterResult
from gpupool.adapters.kubernetes.node import read_node
from gpupool.state.cluster import ClusterCache


def _args(uid: str, names: list[str]) -> ExtenderArgs:
    limits = {"gpupool.io/gpu-memory": "12Gi", "gpupool.io/vgpu": "1"}
    pod = {
        "metadata": {"name": uid, "namespace": "ns", "uid": uid},
        "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]},
    }
    return ExtenderArgs(pod=ScheduledPod.from_json(pod), node_names=tuple(names))


def _fitting(extender: Extender, args: ExtenderArgs) -> ExtenderFilterResult:
    """Every node that takes the pod (/filter answers the planner's pick among them)."""
    return filter_nodes(extender.plans, args.pod, args.node_names, 0.0)


def test_same_node_list_after_a_node_joins_is_read_against_the_new_snapshot() -> None:
    cache = ClusterCache()
    cache.rebuild(
        [read_node(n) for n in [node_json("a", cards=8), node_json("b", cards=8)]], [], []
    )
    extender = Extender(cache, policy="binpack")
    names = ["a", "b", "c"]
    first = _fitting(extender, _args("p1", names))
    assert first.node_names == ("a", "b")
    assert set(first.failed_and_unresolvable) == {"c"}
    again = _fitting(extender, _args("p2", list(names)))  # equal list, new objects: a memo hit
    assert again.node_names == ("a", "b")
    cache.rebuild(
        [
            read_node(n)
            for n in [node_json("a", cards=8), node_json("b", cards=8), node_json("c", cards=8)]
        ],
        [],
        [],
    )
    joined = _fitting(extender, _args("p3", list(names)))
    assert joined.node_names == ("a", "b", "c"), joined
    scores = extender.prioritize(_args("p3", ["c", "a", "x"]))
    assert [s.host for s in scores] == ["c", "a", "x"]
    assert scores[2].score == 0


def test_answers_from_the_memo_are_those_of_a_cold_extender() -> None:
    """Every call after the first hits the memos (plans, rows, JSON heads); a new Extender per
    call has none: the answers must be equal."""
    cache = ClusterCache()
    cache.rebuild([read_node(n) for n in [node_json(f"n{i}", cards=8) for i in range(20)]], [], [])
    names = [f"n{i}" for i in range(25)]
    warm = Extender(cache, policy="binpack")
    for uid in ("p1", "p2", "p1"):
        cold = Extender(cache, policy="binpack")
        assert warm.filter(_args(uid, names)) == cold.filter(_args(uid, names))
        assert warm.prioritize(_args(uid, names)) == Extender(cache, policy="binpack").prioritize(
            _args(uid, names)
        )
        assert warm.prioritize_encoded(_args(uid, names)) == Extender(
            cache, policy="binpack"
        ).prioritize_encoded(_args(uid, names))


def test_prioritize_written_as_json_text_reads_back_as_the_dicts() -> None:
    cache = ClusterCache()
    cache.rebuild([read_node(n) for n in [node_json(f"n{i}", cards=8) for i in range(12)]], [], [])
    extender = Extender(cache, policy="binpack")
    names = [f"n{i}" for i in range(12)] + ['odd "name" \\ é']
    for uid in ("p1", "p1", "p2"):
        args = _args(uid, names)
        text = extender.prioritize_encoded(args)
        assert json.loads(text) == [h.to_json() for h in extender.prioritize(args)]
    pod = ScheduledPod.from_json({"metadata": {"name": "x", "uid": "x"}})
    bad = ExtenderArgs(pod=pod, node_names=("n1",))
    assert json.loads(extender.prioritize_encoded(bad)) == [{"Host": "n1", "Score": 0}]


def test_the_reply_template_writes_every_score_and_reads_back() -> None:
    import numpy as np

    from gpupool.adapters.extender_http.prioritize import PriorityEncoder

    encoder = PriorityEncoder()
    names = (*tuple(f"n{i}" for i in range(11)), 'odd "name" \\ é')
    for scores in ([*list(range(11)), 10], [0] * 12, [*list(range(10, -1, -1)), 3]):
        text = encoder.encode(names, np.array(scores, dtype=np.int64))
        assert json.loads(text) == [
            {"Host": n, "Score": s} for n, s in zip(names, scores, strict=True)
        ]
    assert encoder.encode((), np.zeros(0, dtype=np.int64)) == b"[]"


def test_prioritize_cpu_scores_only_pods_without_a_gpupool_gpu() -> None:
    """The second extender entry is asked about every pod: it scores a pod that asks for no
    gpupool GPU (nodes without GPUs first, then the first GPU node by name) and leaves gpupool's
    own pods (the first entry scores them) and DRA claim pods at 0 everywhere."""
    cache = ClusterCache()
    cache.rebuild([read_node(n) for n in [node_json(f"n{i}", cards=8) for i in range(3)]], [], [])
    extender = Extender(cache, policy="gpupool")
    plain = ScheduledPod.from_json(
        {
            "metadata": {"name": "web", "namespace": "ns", "uid": "u-web"},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "2"}}}]},
        }
    )
    names = ("n2", "cpu-only", "n1")
    reply = json.loads(extender.prioritize_cpu_encoded(ExtenderArgs(plain, names)))
    assert reply == [
        {"Host": "n2", "Score": 0},
        {"Host": "cpu-only", "Score": 10},
        {"Host": "n1", "Score": 5},
    ]
    gpu_pod = _args("g1", list(names))
    assert [h["Score"] for h in json.loads(extender.prioritize_cpu_encoded(gpu_pod))] == [0, 0, 0]
    # and the first entry's prioritize gives the GPU pod's pick 10, a pod without GPU nothing
    assert sorted(h.score for h in extender.prioritize(gpu_pod))[-1] == 10
    assert {h.score for h in extender.prioritize(ExtenderArgs(plain, names))} == {0}
