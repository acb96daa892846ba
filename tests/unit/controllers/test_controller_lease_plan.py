"""The lease lifecycle's pure plan."""

from __future__ import annotations

from typing import Any

from gpupool.controllers.lease_plan import plan_leases, read_lease
from gpupool.controllers.snapshot import format_time, read_pod

T0 = 1_700_000_000.0


def lease(
    phase: str | None = None, *, end: float | None = None, expiry: float | None = None
) -> Any:
    status: dict[str, Any] = {"start": format_time(T0)}
    if phase:
        status["phase"] = phase
    if end is not None:
        status["end"] = format_time(end)
    spec: dict[str, Any] = {
        "tenant": "alpha",
        "podRef": {"namespace": "ns", "name": "p", "uid": "uid-p"},
        "node": "n1",
        "devices": [{"uuid": "GPU-0", "index": 0, "model": "A100-80GB", "offsetBytes": 0,
                     "sizeBytes": 12 * 2**30}],
    }  # fmt: skip
    if expiry is not None:
        spec["expiry"] = format_time(expiry)
    return read_lease({"metadata": {"name": "uid-p", "namespace": "ns"}, "spec": spec,
                       "status": status})  # fmt: skip


def pod(phase: str, node: str | None = "n1") -> Any:
    return read_pod(
        {
            "metadata": {"name": "p", "namespace": "ns", "uid": "uid-p",
                         "labels": {"gpupool.io/tenant": "alpha"}},
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": phase},
        }
    )  # fmt: skip


def test_a_finished_pod_releases_its_lease_with_gib_hours() -> None:
    plan = plan_leases([lease("Active")], {"uid-p": pod("Succeeded")}, T0 + 1800)
    (move,) = plan.moves
    assert (move.phase, move.reason) == ("Released", "PodCompleted")
    assert move.gib_hours == 6.0  # 12 GiB for half an hour


def test_a_lease_whose_pod_is_not_seen_is_released_only_once_confirmed_gone() -> None:
    unsure = plan_leases([lease("Bound")], {}, T0 + 3600)
    assert unsure.moves == () and len(unsure.unsure) == 1
    gone = plan_leases([lease("Bound")], {}, T0 + 3600, known_gone=frozenset({"uid-p"}))
    assert gone.moves[0].reason == "PodGone" and gone.moves[0].gib_hours == 12.0


def test_phases_follow_the_pod() -> None:
    assert plan_leases([lease()], {"uid-p": pod("Pending")}, T0).moves[0].phase == "Bound"
    assert plan_leases([lease("Bound")], {"uid-p": pod("Running")}, T0).moves[0].phase == "Active"
    assert plan_leases([lease("Active")], {"uid-p": pod("Running")}, T0).moves == ()


def test_expiry_and_collection() -> None:
    expired = plan_leases([lease("Active", expiry=T0 + 60)], {"uid-p": pod("Running")}, T0 + 600)
    assert expired.moves[0].phase == "Expired" and expired.moves[0].end == T0 + 60
    ended = lease("Released", end=T0 + 10)
    assert plan_leases([ended], {}, T0 + 100, retention_s=3600).collect == ()
    assert len(plan_leases([ended], {}, T0 + 3611, retention_s=3600).collect) == 1
