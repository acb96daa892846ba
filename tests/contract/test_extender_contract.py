"""Extender wire contract: kube-scheduler's extender/v1 JSON (Go field names, no json tags) in,
and the exact JSON gpupool answers, against golden files in golden/extender/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.builders import node_json

from gpupool.adapters.extender_http.service import Extender
from gpupool.adapters.extender_http.wire import (
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    MalformedExtenderRequest,
)
from gpupool.adapters.kubernetes.node import read_node
from gpupool.domain.allocations import Slice
from gpupool.domain.units import GiB
from gpupool.state.cluster import ClusterCache
from gpupool.state.lease import LeaseRecord, PodRef

GOLDEN = Path(__file__).parent / "golden" / "extender"


def golden(name: str) -> Any:
    return json.loads((GOLDEN / name).read_text())


def cache() -> ClusterCache:
    """free: 4 empty A100-80GB (72Gi allocatable each); half: 4 with 22Gi held on every card
    (50Gi free); t4: T4s; cpu-only: no GPUs."""
    held = [
        LeaseRecord(
            name=f"held-{i}",
            namespace="team-b",
            tenant="team-b",
            pod=PodRef("team-b", f"held-{i}", f"held-{i}"),
            node="half",
            slices=(Slice(i, f"GPU-half-{i}", "A100-80GB", 0, 22 * GiB, 0),),
            amount=22 * GiB,
        )
        for i in range(4)
    ]
    c = ClusterCache()
    c.rebuild(
        [
            read_node(n)
            for n in [
                node_json("free", cards=4),
                node_json("half", cards=4),
                node_json("t4", cards=4, model="T4"),
                node_json("cpu-only"),
            ]
        ],
        [],
        held,
    )
    return c


def test_filter_args_parse_as_kube_scheduler_sends_them() -> None:
    args = ExtenderArgs.from_json(golden("filter_args.json"))
    assert args.node_names == ("free", "half", "t4", "cpu-only")
    assert (args.pod.namespace, args.pod.name) == ("team-a", "infer-0")
    assert args.pod.request.gpu_memory_bytes == 60 * GiB


def test_filter_result_matches_golden() -> None:
    ext = Extender(cache(), policy="binpack")
    result = ext.filter(ExtenderArgs.from_json(golden("filter_args.json")))
    assert result.to_json() == golden("filter_result.json")


def test_prioritize_result_matches_golden() -> None:
    ext = Extender(cache(), policy="binpack")
    args = ExtenderArgs.from_json(golden("filter_args.json"))
    assert [h.to_json() for h in ext.prioritize(args)] == golden("prioritize_result.json")


def test_bind_args_and_result_round_trip() -> None:
    args = ExtenderBindingArgs.from_json(golden("bind_args.json"))
    assert args.to_json() == golden("bind_args.json")
    assert ExtenderBindingResult().to_json() == golden("bind_result.json")


def test_filter_with_no_passing_node_sends_null_node_names() -> None:
    body = golden("filter_args.json")
    body["NodeNames"] = ["half", "t4"]
    result = Extender(cache(), policy="binpack").filter(ExtenderArgs.from_json(body)).to_json()
    assert result["NodeNames"] is None
    assert set(result["FailedNodes"]) | set(result["FailedAndUnresolvableNodes"]) == {"half", "t4"}


def test_a_malformed_pod_request_fails_every_node_with_the_reason() -> None:
    body = golden("filter_args.json")
    body["Pod"]["spec"]["containers"][0]["resources"]["limits"]["gpupool.io/gpu-memory"] = "-3"
    result = Extender(cache(), policy="binpack").filter(ExtenderArgs.from_json(body)).to_json()
    assert result["NodeNames"] is None
    reasons = set(result["FailedAndUnresolvableNodes"].values())
    assert len(reasons) == 1 and "gpu-memory" in reasons.pop()


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ([], "JSON object"),
        ({"NodeNames": ["a"]}, "Pod"),
        ({"Pod": {"metadata": {}}, "NodeNames": "a"}, "NodeNames"),
        ({"Pod": {"metadata": {}}, "NodeNames": [1]}, "NodeNames"),
    ],
)
def test_malformed_extender_args_raise_one_typed_error(body: Any, says: str) -> None:
    with pytest.raises(MalformedExtenderRequest, match=says):
        ExtenderArgs.from_json(body)


def test_malformed_binding_args_name_the_field() -> None:
    body = golden("bind_args.json")
    del body["PodUID"]
    with pytest.raises(MalformedExtenderRequest, match="PodUID"):
        ExtenderBindingArgs.from_json(body)
