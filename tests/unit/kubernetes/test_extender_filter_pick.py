"""/filter answers the planner's pick alone (kube-scheduler then skips its scoring phase, and
/prioritize with it) unless kube-scheduler's own scores could move the pod: its soft preferences,
or a fitting node with a PreferNoSchedule taint it does not tolerate."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from support.builders import node_json, pod_json

from gpupool.adapters.extender_http.filter import filter_nodes
from gpupool.adapters.extender_http.service import Extender
from gpupool.adapters.extender_http.wire import ExtenderArgs
from gpupool.adapters.kubernetes.lease import lease_from_json, lease_to_json
from gpupool.adapters.kubernetes.node import read_node
from gpupool.adapters.kubernetes.pod_view import read_constraints
from gpupool.domain.allocations import Slice
from gpupool.domain.units import GiB
from gpupool.state.cluster import ClusterCache
from gpupool.state.lease import LeaseRecord, PodRef

NAMES = ["n0", "n1", "n2", "n3", "small"]
AVOID = {"key": "spot", "value": "yes", "effect": "PreferNoSchedule"}


def _node(name: str, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    node = node_json(name, cards=1, model="A10") if name == "small" else node_json(name, cards=2)
    if taints:
        node["spec"] = {"taints": taints}
    return node


def _lease_on(node: str, gib: int) -> LeaseRecord:
    """A slice of `gib` on `node`'s card 0: binpack prefers that node for the next pod."""
    record = LeaseRecord(
        name=f"held-{node}",
        namespace="t",
        tenant="t",
        pod=PodRef("t", f"held-{node}", f"held-{node}"),
        node=node,
        slices=(Slice(0, f"GPU-{node}-0", "A100-80GB", 0, gib * GiB, 0),),
        amount=gib * GiB,
    )
    return lease_from_json(lease_to_json(record))


def _extender(*tainted: str) -> tuple[ClusterCache, Extender]:
    cache = ClusterCache()
    nodes = [_node(n, [AVOID] if n in tainted else None) for n in NAMES]
    cache.rebuild([read_node(n) for n in nodes], [], [_lease_on("n2", 40)])
    return cache, Extender(cache, policy="binpack")


def _args(spec: dict[str, Any] | None = None, gib: int = 60) -> ExtenderArgs:
    pod = pod_json("p", namespace="ns", uid="u-p", gpu_memory=f"{gib}Gi", vgpu=1)
    pod["spec"].update(spec or {})
    return ExtenderArgs.from_json({"Pod": pod, "NodeNames": NAMES})


def _pick(ext: Extender, args: ExtenderArgs) -> str:
    """The node /prioritize gives 10 over every node that fits."""
    fitting = filter_nodes(ext.plans, args.pod, args.node_names, 0.0).node_names
    assert fitting is not None and len(fitting) > 1
    top = [h.host for h in ext.prioritize(ExtenderArgs(args.pod, fitting)) if h.score == 10]
    assert len(top) == 1
    return top[0]


def test_filter_answers_the_node_prioritize_would_give_10_and_keeps_the_reasons() -> None:
    _, ext = _extender()
    seen: list[np.ndarray] = []
    ext.set_score_sink(seen.append)
    args = _args(gib=60)
    expected = _pick(ext, args)  # before the filter: it counts its pick on the snapshot
    result = ext.filter(args)
    assert result.node_names == (expected,)
    assert set(result.failed_and_unresolvable) == {"small"}  # its one A10 is too small: said
    assert len(seen) == 1 and sorted(seen[0].tolist())[-1] == 10


def test_the_pick_follows_the_cache_as_it_fills() -> None:
    cache, ext = _extender()
    first = ext.filter(_args(gib=30)).node_names
    assert first == ("n2",)  # n2's card 0 has 40Gi taken: 30Gi more packs it
    cache.set_lease(_lease_on("n3", 70))
    assert ext.filter(_args(gib=10)).node_names == ("n3",)  # now the fullest card fits 10Gi


@pytest.mark.parametrize(
    "spec",
    [
        {
            "affinity": {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 50, "preference": {"matchExpressions": []}}
                    ]
                }
            }
        },
        {
            "affinity": {
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}
                    ]
                }
            }
        },
        {
            "affinity": {
                "podAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 1, "podAffinityTerm": {"topologyKey": "zone"}}
                    ]
                }
            }
        },
        {
            "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}
            ]
        },
    ],
    ids=["preferred-node-affinity", "preferred-anti-affinity", "preferred-affinity", "spread"],
)
def test_a_pod_with_soft_preferences_gets_every_fitting_node(spec: dict[str, Any]) -> None:
    _, ext = _extender()
    assert read_constraints(spec).preferences
    result = ext.filter(_args(spec))
    assert result.node_names == ("n0", "n1", "n2", "n3")


def test_hard_constraints_are_no_preference() -> None:
    spec = {
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
        ],
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "zone"}]
            }
        },
        "tolerations": [{"key": "x", "operator": "Exists"}],
    }
    assert not read_constraints(spec).preferences
    assert not read_constraints(
        {"affinity": "nonsense", "topologySpreadConstraints": 3}
    ).preferences
    _, ext = _extender()
    assert len(ext.filter(_args(spec)).node_names or ()) == 1


def test_a_fitting_node_the_pod_would_avoid_leaves_the_choice_to_the_scores() -> None:
    cache, ext = _extender("n3")
    assert cache.prefer_no_schedule == {"n3"}
    assert ext.filter(_args()).node_names == ("n0", "n1", "n2", "n3")
    tolerated = {"tolerations": [{"key": "spot", "operator": "Exists"}]}
    expected = _pick(ext, _args(tolerated))
    assert ext.filter(_args(tolerated)).node_names == (expected,)
    only_other_effect = {
        "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]
    }
    assert len(ext.filter(_args(only_other_effect)).node_names or ()) == 4


def test_a_tainted_node_that_does_not_fit_does_not_count() -> None:
    cache, ext = _extender("small")
    assert len(ext.filter(_args()).node_names or ()) == 1  # small's A10 takes no 60Gi
    cache.set_node(read_node(_node("small")))  # the taint removed
    assert cache.prefer_no_schedule == set()
    cache.set_node(read_node(_node("n0", [AVOID])))
    assert cache.prefer_no_schedule == {"n0"}
    cache.delete_node("n0")
    assert cache.prefer_no_schedule == set()


def test_one_node_or_none_is_answered_as_it_is() -> None:
    _, ext = _extender()
    one = ext.filter(ExtenderArgs(_args().pod, ("n1",)))
    assert one.node_names == ("n1",)
    none = ext.filter(_args(gib=200))
    assert none.node_names is None and set(none.failed_nodes) | set(
        none.failed_and_unresolvable
    ) == set(NAMES)
