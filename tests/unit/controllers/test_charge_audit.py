"""The charge auditor's decision (`controllers.leases.charge_audit`): a live lease is charged for
what its slices hold in its resource (bytes, or milli-GPU of the GpuNode's card), checked lease
by lease; leases on unknown cards are skipped, ended ones not looked at."""

from __future__ import annotations

from gpupool.adapters.kubernetes.node import read_gpu_node
from gpupool.controllers.leases.charge_audit import (
    REASON,
    audit_charges,
    card_sizes,
)
from gpupool.domain.allocations import Slice
from gpupool.domain.units import GiB
from gpupool.quota.lease import LeasePhase
from gpupool.quota.resource import Resource
from gpupool.state.lease import LeaseRecord, PodRef

CARD = 72 * GiB  # what an A100-80GB offers slices on the dev cluster
CARDS = {f"GPU-n1-{i}": CARD for i in range(8)}


def _slice(index: int, gib: float, offset_gib: int = 0) -> Slice:
    return Slice(
        gpu_index=index,
        uuid=f"GPU-n1-{index}",
        model="A100-80GB",
        offset_bytes=offset_gib * GiB,
        size_bytes=int(gib * GiB),
        compute_milli=0,
    )


def _lease(
    name: str,
    slices: list[Slice],
    amount: int,
    *,
    resource: str = "gpu-memory",
    tenant: str = "team-a",
    phase: LeasePhase = LeasePhase.ACTIVE,
) -> LeaseRecord:
    return LeaseRecord(
        name=name,
        namespace="ns",
        tenant=tenant,
        pod=PodRef("ns", f"pod-{name}", name),
        node="n1",
        slices=tuple(slices),
        amount=amount,
        resource=resource,
        phase=phase,
    )


def test_a_lease_charged_what_it_holds_is_not_flagged() -> None:
    leases = [
        _lease("bytes", [_slice(0, 12)], 12 * GiB),
        _lease("milli", [_slice(1, 36)], 500, resource="gpu"),
        _lease("whole", [_slice(2, 72)], 1000, resource="gpu"),
        _lease("two", [_slice(3, 8), _slice(4, 8)], 16 * GiB),
    ]
    audit = audit_charges(leases, CARDS)
    assert audit.findings == ()
    assert audit.checked == 4 and audit.skipped == ()


def test_a_lease_charged_fewer_bytes_than_it_holds_is_flagged() -> None:
    bad = _lease("bad", [_slice(0, 12)], 8 * GiB)
    [finding] = audit_charges([bad, _lease("ok", [_slice(1, 12)], 12 * GiB)], CARDS).findings
    assert finding.lease is bad and finding.resource is Resource.GPU_MEMORY
    assert (finding.charged, finding.held) == (8 * GiB, 12 * GiB)
    assert finding.problem.startswith("charged 8Gi but holds 12Gi")
    assert "GPU-n1-0" in finding.message and "ns/bad" in finding.message
    assert "report it as a gpupool bug" in finding.message  # and what to do
    assert REASON == "ChargeMismatch"


def test_milli_gpu_is_the_slices_share_of_its_card_rounded_up() -> None:
    # 36Gi of a 72Gi card is 500m; a byte more is 501m (rounded up, as bind charges)
    over = Slice(0, "GPU-n1-0", "A100-80GB", 0, 36 * GiB + 1, 0)
    audit = audit_charges(
        [
            _lease("half-charged-quarter", [_slice(1, 36)], 250, resource="gpu"),
            _lease("just-over-half", [over], 501, resource="gpu"),
            _lease("just-over-half-charged-half", [over], 500, resource="gpu", tenant="team-b"),
        ],
        CARDS,
    )
    assert [(f.lease.name, f.charged, f.held) for f in audit.findings] == [
        ("half-charged-quarter", 250, 500),
        ("just-over-half-charged-half", 500, 501),
    ]
    assert audit.findings[0].problem.startswith("charged 250m but holds 500m")


def test_a_card_in_milli_is_sized_by_its_gpunode_not_the_catalogue() -> None:
    # the same 36Gi slice is half a 72Gi card but 450m of an 80Gi one
    lease = _lease("l", [_slice(0, 36)], 500, resource="gpu")
    assert audit_charges([lease], {"GPU-n1-0": 72 * GiB}).findings == ()
    [finding] = audit_charges([lease], {"GPU-n1-0": 80 * GiB}).findings
    assert finding.held == 450


def test_whole_cards_charged_a_slice_each_are_flagged_with_what_they_hold() -> None:
    # the bypass: gpu: 8 with gpu-memory: 1Gi placed on 8 whole cards, charged 8Gi
    whole = [_slice(i, 72) for i in range(8)]
    [bytes_] = audit_charges([_lease("b", whole, 8 * GiB)], CARDS).findings
    assert bytes_.held == 8 * 72 * GiB
    assert bytes_.problem.startswith("charged 8Gi but holds 576Gi (8 slice(s): 72Gi on GPU-n1-0")
    [milli] = audit_charges([_lease("m", whole[:2], 1000, resource="gpu")], CARDS).findings
    assert (milli.charged, milli.held) == (1000, 2000)
    assert audit_charges([_lease("ok", whole[:2], 2000, resource="gpu")], CARDS).findings == ()


def test_several_slices_are_summed_and_one_wrong_slice_is_enough() -> None:
    three = [_slice(0, 10), _slice(1, 20), _slice(2, 30)]
    assert audit_charges([_lease("ok", three, 60 * GiB)], CARDS).findings == ()
    [finding] = audit_charges([_lease("bad", three, 30 * GiB)], CARDS).findings
    assert finding.held == 60 * GiB
    assert "3 slice(s): 10Gi on GPU-n1-0, 20Gi on GPU-n1-1, 30Gi on GPU-n1-2" in finding.problem


def test_a_lease_on_a_card_no_gpunode_reports_is_skipped_not_flagged() -> None:
    stray = Slice(0, "GPU-gone-0", "A100-80GB", 0, 12 * GiB, 0)
    unknown = _lease("unknown", [stray], 1, resource="gpu")
    partly = _lease("partly", [_slice(0, 12), stray], 1)  # one card known, one not
    bad = _lease("bad", [_slice(1, 12)], 1)
    audit = audit_charges([unknown, partly, bad], CARDS)
    assert [f.lease.name for f in audit.findings] == ["bad"]  # the others do not stop it
    assert audit.skipped == (unknown, partly) and audit.checked == 1


def test_ended_leases_and_unknown_resources_are_not_flagged() -> None:
    ended = [
        _lease(p.value, [_slice(0, 12)], 1, phase=p)
        for p in (LeasePhase.RELEASED, LeasePhase.EXPIRED, LeasePhase.LOST, LeasePhase.RECLAIMED)
    ]
    odd = _lease("odd", [_slice(0, 12)], 1, resource="tokens")
    reserved = _lease("reserved", [_slice(1, 12)], 1, phase=LeasePhase.RESERVED)
    audit = audit_charges([*ended, odd, reserved], CARDS)
    assert [f.lease.name for f in audit.findings] == ["reserved"]  # live from its reservation
    assert audit.skipped == (odd,)


def test_findings_per_tenant_show_zero_for_tenants_without_one() -> None:
    audit = audit_charges(
        [
            _lease("a1", [_slice(0, 12)], 1, tenant="a"),
            _lease("a2", [_slice(1, 12)], 1, tenant="a"),
            _lease("c1", [_slice(2, 12)], 1, tenant="c"),
            _lease("b1", [_slice(3, 12)], 12 * GiB, tenant="b"),
        ],
        CARDS,
    )
    assert audit.by_tenant(["b", "d"]) == (("a", 2), ("b", 0), ("c", 1), ("d", 0))


def test_card_sizes_are_the_gpunodes_allocatable_bytes_else_memory_less_the_reserve() -> None:
    gpunode = {
        "metadata": {"name": "n1"},
        "status": {
            "reservePercent": 10,
            "devices": [
                {"index": 0, "model": "A100-80GB", "uuid": "GPU-a", "memoryBytes": 80 * GiB,
                 "allocatableBytes": 70 * GiB},
                {"index": 1, "model": "A100-80GB", "uuid": "GPU-b", "memoryBytes": 80 * GiB},
            ],
        },
    }  # fmt: skip
    unreadable = {"metadata": {"name": "n2"}, "status": {"devices": [{"index": "x"}]}}
    sizes = card_sizes([read_gpu_node(gpunode), read_gpu_node(unreadable)])
    assert sizes == {"GPU-a": 70 * GiB, "GPU-b": 72 * GiB}
