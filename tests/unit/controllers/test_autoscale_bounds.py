"""No number a workload's owner writes makes the autoscaler's work grow with it: replicas beyond
the cluster maximum (10,000) are bad input, reported once and nothing scaled; a step up stops at
what the tenant's quota could admit (nominal + what it may borrow, maxPods); a record on the
object naming more replicas than the bound, or outside the policy, is not followed."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from fake_cluster import FakeCluster, lease_json, pod_json, quota_json
from fake_workloads import FakeWorkloads, SetUtilisation
from support.builders import node_json

from gpupool.adapters.wire import names
from gpupool.adapters.wire.autoscale import parse_record, read_policy
from gpupool.adapters.wire.quotas import read_quota
from gpupool.adapters.wire.times import format_time
from gpupool.controllers.autoscale.plan import QuotaCeiling, quota_ceiling, within_quota
from gpupool.controllers.autoscale.reconcile import AutoscaleReconciler
from gpupool.domain.requests import Request
from gpupool.domain.units import GiB
from gpupool.placement.autoscale import (
    Direction,
    InvalidAutoscaleBounds,
    InvalidAutoscaleSetting,
    Step,
)
from gpupool.ports import Json

NOW = 1_767_225_600.0
ON = {names.ANN_AUTOSCALE: "true", names.ANN_AUTOSCALE_MAX: "6"}


@pytest.mark.parametrize(
    ("notes", "error", "words"),
    [
        (
            {names.ANN_AUTOSCALE_MIN: "3000000000", names.ANN_AUTOSCALE_MAX: "3000000000"},
            InvalidAutoscaleBounds,
            "annotation gpupool.io/autoscale-min-replicas is '3000000000', above the most "
            "replicas gpupool autoscales (10,000, a cluster maximum); write at most 10000",
        ),
        (
            {names.ANN_AUTOSCALE_MAX: "10001"},
            InvalidAutoscaleBounds,
            "gpupool.io/autoscale-max-replicas is '10001', above the most replicas",
        ),
        (
            {names.ANN_AUTOSCALE_MAX: "9" * 5000},
            InvalidAutoscaleSetting,
            "is 5000 characters long; a setting has at most 64",
        ),
        (
            {names.ANN_AUTOSCALE_MAX: "1_000"},
            InvalidAutoscaleBounds,
            "must be a whole number of replicas",
        ),
        (
            {names.ANN_AUTOSCALE_COOLDOWN: "100000000h"},
            InvalidAutoscaleSetting,
            "gpupool.io/autoscale-cooldown is '100000000h', longer than gpupool accepts (8784h",
        ),
        (
            {names.ANN_AUTOSCALE_COOLDOWN: "9" * 400 + "s"},
            InvalidAutoscaleSetting,
            "characters long",
        ),
    ],
)
def test_settings_beyond_their_bounds_are_refused_with_the_bound(
    notes: dict[str, str], error: type[Exception], words: str
) -> None:
    with pytest.raises(error) as caught:
        read_policy({**ON, **notes})
    assert words in str(caught.value)


def test_settings_at_their_bounds_are_read() -> None:
    policy = read_policy(
        {
            **ON,
            names.ANN_AUTOSCALE_MIN: "10000",
            names.ANN_AUTOSCALE_MAX: "10000",
            names.ANN_AUTOSCALE_COOLDOWN: "8784h",
        }
    )
    assert (policy.min_replicas, policy.max_replicas, policy.cooldown_s) == (
        10_000,
        10_000,
        31_622_400,
    )


def test_a_record_beyond_the_bound_reads_as_no_step() -> None:
    at = format_time(NOW)
    huge = json.dumps({"last": {"at": at, "from": 1, "to": 3_000_000_000}})
    assert parse_record(huge).last is None
    assert parse_record(json.dumps({"last": {"at": at, "from": 1, "to": "3"}})).last is None
    digits = '{"last": {"at": "' + at + '", "from": 1, "to": 1' + "0" * 5000 + "}}"
    assert parse_record(digits).last is None  # past Python's 4,300-digit int limit: unread
    fine = parse_record(json.dumps({"last": {"at": at, "from": 1, "to": 10_000}})).last
    assert fine is not None and fine.to_replicas == 10_000


def _request(gib: int, count: int = 1) -> Request:
    return Request(name="ns/web-0", gpu_count=count, gpu_memory_bytes=gib * GiB, tenant="alpha")


def _quotas(*objects: Json) -> list[Any]:
    return [read_quota(o) for o in objects]


def test_the_quota_ceiling_is_nominal_plus_what_the_tenant_may_borrow() -> None:
    alone = _quotas(quota_json("alpha", 48))
    assert quota_ceiling("alpha", _request(12), alone) == QuotaCeiling(
        4, "tenant alpha's quota (nominal 48Gi) admits at most 4 of 12Gi each"
    )
    capped = _quotas(
        quota_json("alpha", 48, cohort="c", borrowLimit="24Gi"), quota_json("b", 96, cohort="c")
    )
    ceiling = quota_ceiling("alpha", _request(12), capped)
    assert ceiling is not None and ceiling.replicas == 6 and "+ 24Gi it may borrow" in ceiling.why
    cohort = _quotas(
        quota_json("alpha", 48, cohort="c"),
        quota_json("b", 96, cohort="c", lendLimit="36Gi"),
        quota_json("d", 1000, cohort="other"),
    )
    ceiling = quota_ceiling("alpha", _request(12, count=2), cohort)
    assert ceiling is not None and ceiling.replicas == (48 + 36) // 24
    pods = _quotas(quota_json("alpha", 480, maxPods=3))
    assert quota_ceiling("alpha", _request(12), pods) == QuotaCeiling(
        3, "tenant alpha's quota admits at most 3 pods (maxPods)"
    )
    assert quota_ceiling("nobody", _request(12), alone) is None


def test_a_gpu_quota_counts_a_memory_request_against_the_largest_card() -> None:
    gpus = _quotas({"metadata": {"name": "alpha"}, "spec": {"nominal": "2", "resource": "gpu"}})
    ceiling = quota_ceiling("alpha", _request(12), gpus)
    assert ceiling is not None and ceiling.replicas >= 2 * 8  # 12Gi is at most 1/8 of a card


def test_within_quota_cuts_a_step_up_and_holds_at_the_ceiling() -> None:
    ceiling = QuotaCeiling(4, "tenant alpha's quota (nominal 48Gi) admits at most 4 of 12Gi each")
    up = Step(Direction.UP, 10_000, "below the minimum")
    cut = within_quota(up, 2, ceiling)
    assert (cut.direction, cut.replicas) == (Direction.UP, 4)
    assert "wants 10000 replicas, tenant alpha's quota" in cut.reason
    held = within_quota(up, 4, ceiling)
    assert (held.direction, held.replicas, held.unhostable) == (Direction.HOLD, 4, 10_000)
    down = Step(Direction.DOWN, 1, "idle")
    assert within_quota(down, 9, ceiling) is down
    assert within_quota(up, 2, None) is up


def _deployment(replicas: int, **annotations: str) -> Json:
    notes = {names.ANN_AUTOSCALE: "true", names.ANN_AUTOSCALE_MAX: "4", **annotations}
    return {
        "metadata": {"name": "web", "namespace": "ns", "uid": "dep-1", "annotations": notes},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}},
    }


def _cluster(pods: int, quotas: list[Json], gib: int = 12, cards: int = 8) -> FakeCluster:
    objects, leases = [], []
    for i in range(pods):
        pod = pod_json(f"web-{i}", "alpha", gib, admitted_at=NOW - 600, node="n1", phase="Running")
        pod["metadata"]["labels"]["app"] = "web"
        objects.append(pod)
        leases.append(lease_json(pod, phase="Active", start=NOW - 600, gib=gib))
    return FakeCluster(
        pods=objects, leases=leases, quotas=quotas, nodes=[node_json("n1", cards=cards)]
    )


def _run(cluster: FakeCluster, workloads: FakeWorkloads, now: float, pct: float = 95.0) -> None:
    reconciler = AutoscaleReconciler(cluster, workloads, SetUtilisation(pct), lambda: now)
    asyncio.run(reconciler.reconcile())


def test_a_poisoned_deployment_is_reported_once_and_nothing_is_scaled() -> None:
    poisoned = _deployment(
        2, **{names.ANN_AUTOSCALE_MIN: "3000000000", names.ANN_AUTOSCALE_MAX: "3000000000"}
    )
    workloads = FakeWorkloads([("Deployment", poisoned)])
    cluster = _cluster(2, [quota_json("alpha", 480)])
    _run(cluster, workloads, NOW)
    _run(cluster, workloads, NOW + 30)
    assert [w[0] for w in workloads.writes] == ["annotate", "event"]  # once
    [(_, reason, message, warning)] = workloads.events
    assert reason == "AutoscaleInvalid" and warning
    assert "above the most replicas gpupool autoscales (10,000" in message
    assert workloads.get("Deployment", "ns", "web")["spec"]["replicas"] == 2


def test_a_minimum_above_the_quota_scales_only_to_what_the_quota_admits() -> None:
    # 10,000 replicas asked at once; alpha's 60Gi holds five 12Gi pods; the cards hold 40+
    workloads = FakeWorkloads(
        [("Deployment", _deployment(2, **{names.ANN_AUTOSCALE_MIN: "10000",
                                           names.ANN_AUTOSCALE_MAX: "10000"}))]
    )  # fmt: skip
    cluster = _cluster(2, [quota_json("alpha", 60)])
    _run(cluster, workloads, NOW)
    assert workloads.get("Deployment", "ns", "web")["spec"]["replicas"] == 5
    assert (
        "tenant alpha's quota (nominal 60Gi) admits at most 5 of 12Gi each"
        in (workloads.events[0][2])
    )


def test_at_the_quota_ceiling_a_step_up_holds_and_is_reported_once() -> None:
    workloads = FakeWorkloads([("Deployment", _deployment(2))])
    cluster = _cluster(2, [quota_json("alpha", 24)])
    _run(cluster, workloads, NOW)
    _run(cluster, workloads, NOW + 30)
    assert workloads.get("Deployment", "ns", "web")["spec"]["replicas"] == 2
    [(_, reason, message, warning)] = workloads.events
    assert reason == "AutoscaleNoRoom" and warning
    assert "admits at most 2 of 12Gi each" in message


def test_a_recorded_step_outside_the_policy_is_not_finished() -> None:
    record = json.dumps({"last": {"at": format_time(NOW - 5), "from": 2, "to": 9000}})
    workloads = FakeWorkloads(
        [("Deployment", _deployment(2, **{names.ANN_AUTOSCALE_STATUS: record}))]
    )
    _run(_cluster(2, [quota_json("alpha", 480)]), workloads, NOW, pct=50.0)
    assert workloads.get("Deployment", "ns", "web")["spec"]["replicas"] == 2
    assert not [w for w in workloads.writes if w[0] == "scale"]
