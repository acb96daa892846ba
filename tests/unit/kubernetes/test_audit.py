"""The allocation audit (DESIGN.md section 9) over hand-built pods, leases and GpuNodes."""

from __future__ import annotations

import json
from typing import Any

from support.builders import pod_json

from gpupool.adapters.kubernetes.audit import audit
from gpupool.domain.units import GiB


def _dev(index: int, offset_gib: int, size_gib: int, compute: int = 0) -> dict[str, Any]:
    return {
        "uuid": f"GPU-n1-{index}",
        "index": index,
        "model": "A100-80GB",
        "offsetBytes": offset_gib * GiB,
        "sizeBytes": size_gib * GiB,
        "computePercent": compute,
    }


def _ext(offset_gib: int, size_gib: int) -> dict[str, int]:
    return {"offsetBytes": offset_gib * GiB, "sizeBytes": size_gib * GiB}


def _lease(
    uid: str,
    devices: list[dict[str, Any]],
    node: str = "n1",
    phase: str | None = None,
    *,
    amount: int | None = None,
    resource: str = "gpu-memory",
) -> dict[str, Any]:
    """A lease on `devices`, charged `amount` in `resource` (default: the bytes they hold)."""
    obj: dict[str, Any] = {
        "metadata": {"name": uid, "namespace": "ns"},
        "spec": {
            "tenant": "default",
            "podRef": {"namespace": "ns", "name": f"pod-{uid}", "uid": uid},
            "node": node,
            "devices": devices,
            "resource": resource,
            "amount": sum(d["sizeBytes"] for d in devices) if amount is None else amount,
        },
    }
    if phase:
        obj["status"] = {"phase": phase}
    return obj


def _pod(
    uid: str,
    node: str | None = "n1",
    devices: list[dict[str, Any]] | None = None,
    phase: str = "Running",
) -> dict[str, Any]:
    """A vgpu pod in namespace ns, bound to `node`, carrying `devices` as its allocation."""
    annotations = {} if devices is None else {"gpupool.io/allocation": json.dumps(devices)}
    return pod_json(
        f"pod-{uid}", namespace="ns", uid=uid, vgpu=1, annotations=annotations,
        node_name=node or None, phase=phase,
    )  # fmt: skip


GPUNODE = {
    "metadata": {"name": "n1"},
    "status": {"devices": [{"uuid": f"GPU-n1-{i}", "allocatableBytes": 72 * GiB} for i in (0, 1)]},
}


def test_consistent_cluster_has_no_violation() -> None:
    a, b = [_dev(0, 0, 12)], [_dev(0, 12, 24)]
    result = audit(
        [_pod("a", devices=a), _pod("b", devices=b), _pod("gone-lease", devices=None, node=None)],
        [_lease("a", a), _lease("b", b), _lease("old", [_dev(0, 0, 70)], phase="Released")],
        [GPUNODE],
    )
    assert result.ok, str(result)
    assert result.leased == {("n1", "GPU-n1-0"): 36 * GiB}
    assert result.annotated == result.leased
    assert (result.live_leases, result.gpu_pods, result.bound_pods) == (2, 3, 2)


def test_overlapping_leases_and_an_overcommitted_card_are_found() -> None:
    a, b = [_dev(0, 0, 40, 60)], [_dev(0, 30, 40, 60)]
    result = audit([_pod("a", devices=a), _pod("b", devices=b)], [_lease("a", a), _lease("b", b)],
                   [GPUNODE])  # fmt: skip
    kinds = sorted(v.kind for v in result.violations)
    assert kinds == ["offset-overlap", "overcommit", "overcommit"], str(result)
    assert "ns/a [0, " in str(result.of_kind("offset-overlap")[0])


def test_split_leases_are_checked_extent_by_extent() -> None:
    # a: [0, 10) and [30, 40); b fills [10, 30) and [40, 72): the card is full, nothing shared
    a = [dict(_dev(0, 0, 20), extents=[_ext(0, 10), _ext(30, 10)])]
    b = [dict(_dev(0, 10, 52), extents=[_ext(10, 20), _ext(40, 32)])]
    pods, leases = [_pod("a", devices=a), _pod("b", devices=b)], [_lease("a", a), _lease("b", b)]
    result = audit(pods, leases, [GPUNODE])
    assert result.ok, str(result)
    assert result.leased == {("n1", "GPU-n1-0"): 72 * GiB}
    # b shrinks; c's extents out of order are a malformed lease, in order one lands inside a's
    b = [dict(_dev(0, 10, 42), extents=[_ext(10, 20), _ext(40, 22)])]
    c = [dict(_dev(0, 62, 10), extents=[_ext(62, 5), _ext(35, 5)])]
    result = audit(
        [_pod("a", devices=a), _pod("b", devices=b), _pod("c", devices=c)],
        [_lease("a", a), _lease("b", b), _lease("c", c)],
        [GPUNODE],
    )
    kinds = [v.kind for v in result.violations]
    assert kinds == ["malformed-lease", "pod-without-lease", "annotation-mismatch"], str(result)
    c = [dict(_dev(0, 35, 10), extents=[_ext(35, 5), _ext(62, 5)])]
    result = audit(
        [_pod("a", devices=a), _pod("b", devices=b), _pod("c", devices=c)],
        [_lease("a", a), _lease("b", b), _lease("c", c)],
        [GPUNODE],
    )
    assert [v.kind for v in result.violations] == ["offset-overlap"], str(result)
    assert str(result.violations[0]).endswith(
        f"ns/a [{30 * GiB}, {40 * GiB}) and ns/c [{35 * GiB}, {40 * GiB})"
    )


def test_an_extent_past_the_card_is_found() -> None:
    a = [dict(_dev(0, 0, 10), extents=[_ext(0, 5), _ext(70, 5)])]
    result = audit([_pod("a", devices=a)], [_lease("a", a)], [GPUNODE])
    assert [v.kind for v in result.violations] == ["offset-beyond-card"], str(result)


def test_lease_whose_pod_is_gone_or_finished_is_found() -> None:
    result = audit(
        [_pod("done", devices=[_dev(1, 0, 8)], phase="Succeeded")],
        [_lease("gone", [_dev(0, 0, 8)]), _lease("done", [_dev(1, 0, 8)])],
    )
    found = {v.subject: v.detail for v in result.of_kind("lease-without-pod")}
    assert set(found) == {"ns/gone", "ns/done"}
    assert "is gone" in found["ns/gone"] and "is Succeeded" in found["ns/done"]


def test_pod_without_lease_and_card_sums_that_differ_are_found() -> None:
    result = audit([_pod("a", devices=[_dev(0, 0, 12)])], [])
    assert [v.kind for v in result.violations] == ["pod-without-lease", "card-reserved-differs"]


def test_unbound_reservation_wrong_node_and_annotation_mismatch_are_found() -> None:
    result = audit(
        [
            _pod("pending", node=None),
            _pod("moved", node="n2", devices=[_dev(0, 0, 8)]),
            _pod("other", devices=[_dev(1, 0, 8)]),
        ],
        [
            _lease("pending", [_dev(0, 20, 8)]),
            _lease("moved", [_dev(0, 0, 8)]),
            _lease("other", [_dev(1, 8, 8)]),
        ],
    )
    kinds = {v.kind for v in result.violations}
    assert {"reserved-unbound", "lease-wrong-node", "annotation-mismatch"} <= kinds, str(result)


def test_a_lease_charged_other_than_it_holds_is_found() -> None:
    twelve, half = [_dev(0, 0, 12)], [_dev(1, 0, 36)]
    two = [_dev(0, 12, 24), _dev(1, 36, 36)]  # 24Gi + half a card
    gone_card = [{**_dev(0, 0, 12), "uuid": "GPU-elsewhere"}]
    leases = [
        _lease("ok-bytes", twelve),
        _lease("ok-milli", half, resource="gpu", amount=500),  # 36Gi of the 72Gi card
        _lease("under", two, amount=12 * GiB),
        _lease("quarter", [_dev(0, 36, 36)], resource="gpu", amount=250),
        _lease("unknown-card", gone_card, amount=1),  # no GpuNode reports it: unchecked
        _lease("ended", [_dev(1, 0, 8)], phase="Released", amount=1),
    ]
    result = audit([], leases, [GPUNODE])
    found = {v.subject: v.detail for v in result.of_kind("charge-mismatch")}
    assert found == {
        "ns/under": "charged 12Gi but holds 60Gi (2 slice(s): 24Gi on GPU-n1-0, 36Gi on GPU-n1-1)",
        "ns/quarter": "charged 250m but holds 500m (1 slice(s): 500m on GPU-n1-0)",
    }
    # a GpuNode without allocatableBytes: its memoryBytes less the reserve, as placement counts
    reported = {"metadata": {"name": "n1"}, "status": {"reservePercent": 10, "devices": [
        {"uuid": f"GPU-n1-{i}", "memoryBytes": 80 * GiB} for i in (0, 1)]}}  # fmt: skip
    assert {v.subject for v in audit([], leases, [reported]).of_kind("charge-mismatch")} == {
        "ns/under", "ns/quarter"}  # fmt: skip
    # without the GpuNode no card's size is known: nothing is judged
    assert audit([], leases).of_kind("charge-mismatch") == []
