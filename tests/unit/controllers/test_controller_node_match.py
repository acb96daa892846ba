"""Which nodes a pod may run on by its own spec: nodeSelector, required node affinity, taints
(decoded at the edge, asked of the typed values)."""

from __future__ import annotations

from typing import Any

from gpupool.adapters.kubernetes.node import read_node
from gpupool.adapters.kubernetes.pod_view import read_constraints
from gpupool.state.nodes import NodeObject


def node(name: str, labels: dict[str, str] | None = None, taints: Any = None) -> NodeObject:
    return read_node(
        {
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name, **(labels or {})},
            },
            "spec": {"taints": taints or []},
        }
    )


def affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
            }
        }
    }


def test_no_constraints_allow_every_untainted_node() -> None:
    assert read_constraints({}).allows(node("n1"))


def test_node_selector_needs_every_label() -> None:
    c = read_constraints({"nodeSelector": {"zone": "a", "kubernetes.io/hostname": "n1"}})
    assert c.allows(node("n1", {"zone": "a"}))
    assert not c.allows(node("n1", {"zone": "b"}))
    assert not c.allows(node("n2", {"zone": "a"}))


def test_required_affinity_any_term_all_expressions() -> None:
    c = read_constraints(
        affinity(
            {
                "matchExpressions": [
                    {"key": "zone", "operator": "In", "values": ["a", "b"]},
                    {"key": "old", "operator": "DoesNotExist"},
                ]
            },
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n9"]}]},
        )
    )
    assert c.allows(node("n1", {"zone": "b"}))
    assert not c.allows(node("n1", {"zone": "b", "old": "1"}))
    assert not c.allows(node("n1", {"zone": "c"}))
    assert c.allows(node("n9"))  # the second term
    gt = read_constraints(
        affinity({"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["3"]}]})
    )
    assert gt.allows(node("n1", {"gen": "4"})) and not gt.allows(node("n1", {"gen": "3"}))
    notin = read_constraints(
        affinity({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]})
    )
    assert notin.allows(node("n1")) and not notin.allows(node("n1", {"zone": "a"}))


def test_untolerated_no_schedule_taints_exclude_a_node() -> None:
    taint = [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]
    soft = [{"key": "dedicated", "value": "infer", "effect": "PreferNoSchedule"}]
    assert not read_constraints({}).allows(node("n1", taints=taint))
    assert read_constraints({}).allows(node("n1", taints=soft))
    equal = {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "infer"}]}
    assert read_constraints(equal).allows(node("n1", taints=taint))
    wrong = {"tolerations": [{"key": "dedicated", "value": "train"}]}
    assert not read_constraints(wrong).allows(node("n1", taints=taint))
    everything = {"tolerations": [{"operator": "Exists"}]}
    assert read_constraints(everything).allows(node("n1", taints=taint))
    other_effect = {
        "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}]
    }
    assert not read_constraints(other_effect).allows(node("n1", taints=taint))


def test_the_refusal_names_the_constraint_the_node_breaks() -> None:
    selector = read_constraints({"nodeSelector": {"kubernetes.io/hostname": "gpu-node-1"}})
    assert selector.refusal(node("gpu-node-1")) is None
    assert selector.refusal(node("gpu-node-0")) == (
        "the pod's nodeSelector asks for kubernetes.io/hostname=gpu-node-1; node gpu-node-0 has "
        "kubernetes.io/hostname=gpu-node-0"
    )
    assert "has no label pool" in str(read_constraints({"nodeSelector": {"pool": "a"}}).refusal(
        node("n1")
    ))  # fmt: skip
    terms = affinity({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]})
    assert read_constraints(terms).refusal(node("n1", {"zone": "b"})) == (
        "node n1 matches none of the pod's required node affinity terms"
    )
    taint = [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]
    assert read_constraints({}).refusal(node("n1", taints=taint)) == (
        "node n1 has the taint dedicated=infer:NoSchedule, which the pod does not tolerate"
    )
