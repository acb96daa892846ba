"""The autoscaler's reconciler over the in-memory cluster: a step writes the record, then the
scale subresource, then an event with its numbers; the cooldown holds across a restart (it is
read from the object); bad annotations and a step no card can host are reported once, not every
round; a recorded step the controller did not finish is finished; no figures, no step."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fake_cluster import FakeCluster, lease_json, pod_json
from fake_workloads import FakeWorkloads, SetUtilisation
from support.builders import node_json

from gpupool.adapters.wire import names
from gpupool.adapters.wire.times import format_time
from gpupool.controllers.autoscale.reconcile import AutoscaleReconciler
from gpupool.ports import Json

NOW = 1_767_225_600.0
WEB = "Deployment/ns/web"


def _deployment(replicas: int, **annotations: str) -> Json:
    notes = {names.ANN_AUTOSCALE: "true", names.ANN_AUTOSCALE_MAX: "4", **annotations}
    return {
        "metadata": {"name": "web", "namespace": "ns", "uid": "dep-1", "annotations": notes},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}},
    }


def _cluster(pods: int, gib: int = 12, cards: int = 2) -> FakeCluster:
    objects, leases = [], []
    for i in range(pods):
        pod = pod_json(f"web-{i}", "alpha", gib, admitted_at=NOW - 600, node="n1", phase="Running")
        pod["metadata"]["labels"]["app"] = "web"
        objects.append(pod)
        leases.append(lease_json(pod, phase="Active", start=NOW - 600, gib=gib))
    other = pod_json("db-0", "alpha", gib, admitted_at=NOW - 600, node="n1", phase="Running")
    return FakeCluster(pods=[*objects, other], leases=leases, nodes=[node_json("n1", cards=cards)])


def _run(
    cluster: FakeCluster,
    workloads: FakeWorkloads,
    source: SetUtilisation,
    now: float,
) -> list[Any]:
    reconciler = AutoscaleReconciler(cluster, workloads, source, lambda: now)
    return asyncio.run(reconciler.reconcile())


def _record(workloads: FakeWorkloads) -> dict[str, Any]:
    notes = workloads.get("Deployment", "ns", "web")["metadata"]["annotations"]
    data: dict[str, Any] = json.loads(notes[names.ANN_AUTOSCALE_STATUS])
    return data


def test_95_percent_scales_2_to_4_recording_first_then_scaling_then_telling() -> None:
    workloads = FakeWorkloads([("Deployment", _deployment(2))])
    source = SetUtilisation(95.0)
    _run(_cluster(2), workloads, source, NOW)
    assert [w[0] for w in workloads.writes] == ["annotate", "scale", "event"]
    assert workloads.get("Deployment", "ns", "web")["spec"]["replicas"] == 4
    assert _record(workloads)["last"] == {"at": format_time(NOW), "from": 2, "to": 4}
    [(key, reason, message, warning)] = workloads.events
    assert (key, reason, warning) == (WEB, "AutoscaledUp", False)
    assert "2 → 4" in message and "95%" in message and "80%" in message and "2 pods" in message
    assert source.asked == [("ns/web-0", "ns/web-1")]  # its own pods only, not db-0


def test_the_cooldown_holds_across_a_restart_and_ends() -> None:
    workloads = FakeWorkloads(
        [("Deployment", _deployment(2, **{names.ANN_AUTOSCALE_COOLDOWN: "60s"}))]
    )
    _run(_cluster(2), workloads, SetUtilisation(95.0), NOW)
    cluster = _cluster(4)
    done = len(workloads.writes)
    _run(cluster, workloads, SetUtilisation(10.0), NOW + 59)  # a new reconciler: a restart
    assert len(workloads.writes) == done  # nothing inside the cooldown
    _run(cluster, workloads, SetUtilisation(10.0), NOW + 60)
    assert workloads.get("Deployment", "ns", "web")["spec"]["replicas"] == 1
    assert _record(workloads)["last"]["from"] == 4
    assert workloads.events[-1][1] == "AutoscaledDown" and "10%" in workloads.events[-1][2]


def test_bad_annotations_are_reported_once_and_nothing_is_scaled() -> None:
    bad = _deployment(2, **{names.ANN_AUTOSCALE_UP: "150"})
    workloads = FakeWorkloads([("Deployment", bad)])
    _run(_cluster(2), workloads, SetUtilisation(95.0), NOW)
    _run(_cluster(2), workloads, SetUtilisation(95.0), NOW + 30)
    assert [w[0] for w in workloads.writes] == ["annotate", "event"]  # once
    [(_, reason, message, warning)] = workloads.events
    assert reason == "AutoscaleInvalid" and warning and names.ANN_AUTOSCALE_UP in message
    assert workloads.get("Deployment", "ns", "web")["spec"]["replicas"] == 2


def test_a_fixed_problem_is_forgotten_so_the_next_is_told() -> None:
    workloads = FakeWorkloads([("Deployment", _deployment(2, **{names.ANN_AUTOSCALE_MIN: "9"}))])
    _run(_cluster(2), workloads, SetUtilisation(50.0), NOW)
    notes = workloads.get("Deployment", "ns", "web")["metadata"]["annotations"]
    notes[names.ANN_AUTOSCALE_MIN] = "1"
    _run(_cluster(2), workloads, SetUtilisation(50.0), NOW + 30)
    assert "reported" not in _record(workloads)
    notes[names.ANN_AUTOSCALE_MIN] = "9"
    _run(_cluster(2), workloads, SetUtilisation(50.0), NOW + 60)
    assert [e[1] for e in workloads.events] == ["AutoscaleInvalid", "AutoscaleInvalid"]


def test_a_step_no_card_can_host_is_reported_once() -> None:
    # one 80 GB card holding two 30Gi slices: a third does not fit
    workloads = FakeWorkloads([("Deployment", _deployment(2))])
    cluster = _cluster(2, gib=30, cards=1)
    _run(cluster, workloads, SetUtilisation(95.0), NOW)
    _run(cluster, workloads, SetUtilisation(95.0), NOW + 30)
    assert [w[0] for w in workloads.writes] == ["annotate", "event"]
    [(_, reason, message, warning)] = workloads.events
    assert reason == "AutoscaleNoRoom" and warning and "4 replicas" in message
    assert workloads.get("Deployment", "ns", "web")["spec"]["replicas"] == 2


def test_a_step_up_is_cut_to_the_room() -> None:
    # one 80 GB card (74.5 GiB, less the reserve) with two 20Gi slices: room for one more
    workloads = FakeWorkloads([("Deployment", _deployment(2))])
    _run(_cluster(2, gib=20, cards=1), workloads, SetUtilisation(95.0), NOW)
    assert workloads.get("Deployment", "ns", "web")["spec"]["replicas"] == 3
    assert "room for 1 more" in workloads.events[0][2]


def test_a_recorded_step_left_unfinished_is_finished() -> None:
    record = json.dumps({"last": {"at": format_time(NOW - 5), "from": 2, "to": 4}})
    workloads = FakeWorkloads(
        [("Deployment", _deployment(2, **{names.ANN_AUTOSCALE_STATUS: record}))]
    )
    _run(_cluster(2), workloads, SetUtilisation(50.0), NOW)
    assert [w[0] for w in workloads.writes] == ["scale", "event"]
    assert workloads.get("Deployment", "ns", "web")["spec"]["replicas"] == 4


def test_no_figures_no_step_and_the_interval_throttles() -> None:
    workloads = FakeWorkloads([("Deployment", _deployment(2))])
    source = SetUtilisation(None)
    reconciler = AutoscaleReconciler(_cluster(2), workloads, source, lambda: NOW, interval_s=15)
    asyncio.run(reconciler.reconcile())
    asyncio.run(reconciler.reconcile())
    assert workloads.writes == [] and len(source.asked) == 1


def test_a_workload_without_the_annotation_is_left_alone() -> None:
    plain = _deployment(2)
    plain["metadata"]["annotations"] = {}
    workloads = FakeWorkloads([("StatefulSet", plain)])
    source = SetUtilisation(95.0)
    assert _run(_cluster(2), workloads, source, NOW) == [] and source.asked == []


def test_a_statefulset_is_scaled_the_same_way() -> None:
    workloads = FakeWorkloads([("StatefulSet", _deployment(2))])
    _run(_cluster(2), workloads, SetUtilisation(95.0), NOW)
    assert workloads.get("StatefulSet", "ns", "web")["spec"]["replicas"] == 4
    assert workloads.writes[1] == ("scale", "StatefulSet/ns/web", 4)


def test_a_workload_that_does_not_decode_is_set_aside_and_the_other_is_scaled() -> None:
    broken = _deployment(2)
    broken["metadata"]["name"] = "broken"
    broken["spec"]["selector"] = "app=web"  # not a LabelSelector: its decoding raises
    workloads = FakeWorkloads([("Deployment", broken), ("Deployment", _deployment(2))])
    cluster = _cluster(2)
    _run(cluster, workloads, SetUtilisation(95.0), NOW)
    assert workloads.get("Deployment", "ns", "web")["spec"]["replicas"] == 4
    assert workloads.get("Deployment", "ns", "broken")["spec"]["replicas"] == 2
    [(key, message)] = [(k, m) for k, r, m in cluster.events if r == "ReconcileFailed"]
    assert key == "ns/broken" and "AttributeError" in message
