"""Which live pods the defragmentation planner may move, and the budget that covers each: pods
under any notice, on their way out, or in a gang stay; a PodDisruptionBudget selects by labels
in its namespace (an empty selector: all of them; none: no pod)."""

from __future__ import annotations

from typing import Any

import pytest

from gpupool.adapters.kubernetes.pdb import read_budget
from gpupool.adapters.kubernetes.pod_view import read_pod
from gpupool.state.defrag import budget_of, movable


def pod(**meta: Any) -> dict[str, Any]:
    annotations = meta.pop("annotations", {})
    labels = {"gpupool.io/tenant": "t", **meta.pop("labels", {})}
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u",
            "labels": labels,
            "annotations": annotations,
            **meta,
        },
        "spec": {
            "nodeName": "n1",
            "containers": [
                {"name": "m", "resources": {"limits": {"gpupool.io/gpu-memory": "8Gi"}}}
            ],
        },
        "status": {"phase": "Running"},
    }


NOTICE = '{"at":"2026-01-01T00:00:00Z","evictAt":"2026-01-01T00:01:00Z","claimant":"x","for":""}'


def test_a_running_gpu_pod_may_move() -> None:
    assert movable(read_pod(pod()))


@pytest.mark.parametrize(
    "annotation",
    [
        "gpupool.io/reclaim-notice",
        "gpupool.io/expiry-notice",
        "gpupool.io/drain-notice",
        "gpupool.io/defrag-notice",
    ],
)
def test_a_pod_under_any_notice_stays(annotation: str) -> None:
    assert not movable(read_pod(pod(annotations={annotation: NOTICE})))


def test_a_gang_member_and_a_pod_being_deleted_stay() -> None:
    gang = pod(labels={"gpupool.io/gang": "g"}, annotations={"gpupool.io/gang-size": "2"})
    assert read_pod(gang).gang is not None and not movable(read_pod(gang))
    assert not movable(read_pod(pod(deletionTimestamp="2026-01-01T00:00:00Z")))


def test_budgets_select_by_labels_in_their_namespace() -> None:
    view = read_pod(pod(labels={"app": "a"}))
    by_label = read_budget(
        {
            "metadata": {"name": "b", "namespace": "ns"},
            "spec": {"selector": {"matchLabels": {"app": "a"}}},
            "status": {"disruptionsAllowed": 1},
        }
    )
    elsewhere = read_budget(
        {"metadata": {"name": "c", "namespace": "other"}, "spec": {"selector": {}}}
    )
    everyone = read_budget({"metadata": {"name": "d", "namespace": "ns"}, "spec": {"selector": {}}})
    nobody = read_budget({"metadata": {"name": "a0", "namespace": "ns"}, "spec": {}})
    assert budget_of(view, [elsewhere, nobody]) is None
    assert budget_of(view, [by_label, elsewhere]) == by_label and by_label.allowed == 1
    assert budget_of(view, [everyone]) == everyone and everyone.allowed == 0
