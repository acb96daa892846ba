"""The autoscaler's annotations → `ScalePolicy` (defaults; each kind of bad input its own typed
error naming the annotation), the controller's record round trip, a workload's decoding and
its selector."""

from __future__ import annotations

import pytest

from gpupool.adapters.kubernetes.workload import node_address, read_workload
from gpupool.adapters.wire import names
from gpupool.adapters.wire.autoscale import (
    autoscaled,
    parse_record,
    read_policy,
    record_annotation,
)
from gpupool.placement.autoscale import (
    InvalidAutoscaleBounds,
    InvalidAutoscaleSetting,
    InvalidAutoscaleThreshold,
    LastStep,
    ScalePolicy,
)
from gpupool.state.workload import AutoscaleRecord

ON = {names.ANN_AUTOSCALE: "true", names.ANN_AUTOSCALE_MAX: "6"}


def test_defaults_are_the_issues() -> None:
    assert read_policy(ON) == ScalePolicy(
        max_replicas=6, min_replicas=1, up_pct=80.0, down_pct=30.0, cooldown_s=300.0
    )


def test_every_setting_is_read() -> None:
    policy = read_policy(
        {
            **ON,
            names.ANN_AUTOSCALE_MIN: "2",
            names.ANN_AUTOSCALE_UP: "90%",
            names.ANN_AUTOSCALE_DOWN: "20",
            names.ANN_AUTOSCALE_COOLDOWN: "1m30s",
        }
    )
    assert policy == ScalePolicy(6, 2, 90.0, 20.0, 90.0)


@pytest.mark.parametrize(
    ("extra", "error", "named"),
    [
        ({names.ANN_AUTOSCALE_UP: "120"}, InvalidAutoscaleThreshold, names.ANN_AUTOSCALE_UP),
        ({names.ANN_AUTOSCALE_DOWN: "-3"}, InvalidAutoscaleThreshold, names.ANN_AUTOSCALE_DOWN),
        ({names.ANN_AUTOSCALE_UP: "high"}, InvalidAutoscaleThreshold, names.ANN_AUTOSCALE_UP),
        (
            {names.ANN_AUTOSCALE_UP: "30", names.ANN_AUTOSCALE_DOWN: "40"},
            InvalidAutoscaleThreshold,
            names.ANN_AUTOSCALE_DOWN,
        ),
        ({names.ANN_AUTOSCALE_MIN: "8"}, InvalidAutoscaleBounds, names.ANN_AUTOSCALE_MIN),
        ({names.ANN_AUTOSCALE_MIN: "0"}, InvalidAutoscaleBounds, names.ANN_AUTOSCALE_MIN),
        ({names.ANN_AUTOSCALE_MAX: "many"}, InvalidAutoscaleBounds, names.ANN_AUTOSCALE_MAX),
        ({names.ANN_AUTOSCALE_COOLDOWN: "soon"}, InvalidAutoscaleSetting, "cooldown"),
        ({names.ANN_AUTOSCALE: "yes"}, InvalidAutoscaleSetting, names.ANN_AUTOSCALE),
    ],
)
def test_bad_input_names_the_annotation(
    extra: dict[str, str], error: type[Exception], named: str
) -> None:
    with pytest.raises(error, match=named):
        read_policy({**ON, **extra})


def test_max_is_required() -> None:
    with pytest.raises(InvalidAutoscaleBounds, match="is required"):
        read_policy({names.ANN_AUTOSCALE: "true"})


def test_only_false_or_absent_opts_out() -> None:
    assert autoscaled(ON) and autoscaled({names.ANN_AUTOSCALE: "yes"})
    assert not autoscaled({}) and not autoscaled({names.ANN_AUTOSCALE: "false"})


def test_the_record_round_trips_and_an_unreadable_one_is_empty() -> None:
    record = AutoscaleRecord(LastStep(1_700_000_000.5, 2, 4), "no room for 4 replicas")
    assert parse_record(record_annotation(record)) == record
    assert parse_record(record_annotation(AutoscaleRecord())) == AutoscaleRecord()
    assert parse_record("{not json") == AutoscaleRecord()
    assert parse_record('{"last": {"at": "2026-01-01T00:00:00Z"}}') == AutoscaleRecord()


def _deployment(annotations: dict[str, str]) -> dict[str, object]:
    return {
        "metadata": {"name": "web", "namespace": "ns", "uid": "u1", "annotations": annotations},
        "spec": {
            "replicas": 3,
            "selector": {
                "matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["batch"]}],
            },
        },
    }


def test_a_workload_is_decoded_once_with_its_problem() -> None:
    good = read_workload(_deployment(ON), "Deployment")
    assert good.policy == read_policy(ON) and good.problem is None and good.replicas == 3
    assert good.selector.matches({"app": "web", "tier": "serve"})
    assert not good.selector.matches({"app": "web", "tier": "batch"})
    assert not good.selector.matches({"app": "db"})
    bad = read_workload(_deployment({**ON, names.ANN_AUTOSCALE_UP: "150"}), "Deployment")
    assert bad.policy is None and bad.problem is not None and names.ANN_AUTOSCALE_UP in bad.problem


def test_node_address_prefers_the_internal_ip() -> None:
    node = {"status": {"addresses": [{"type": "Hostname", "address": "n1"},
                                     {"type": "InternalIP", "address": "10.0.0.7"}]}}  # fmt: skip
    assert node_address(node) == "10.0.0.7"
    assert node_address({"status": {}}) is None
