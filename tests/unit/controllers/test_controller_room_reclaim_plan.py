"""Reclaim for room: the controller's pure plan for a pod the quota admitted but no node can take.

The cluster in most tests: two nodes `n1`, `n2` with one A100-80GB each (72Gi allocatable after
the reserved share). Tenants of cohort `c`: `alpha` (the lender, nominal 200Gi, idle) and `beta`
(nominal and guaranteed 72Gi). Beta runs b1, b2 within its quota and b3, b4 borrowed, 36Gi each:
the cards are full though the cohort's quota is not, so alpha's a1 (36Gi) is admitted and stays
Unschedulable.
"""

from __future__ import annotations

import json
from typing import Any

from test_controller_reclaim_plan import reclaim_round

from gpupool.adapters.kubernetes.node import read_node
from gpupool.adapters.kubernetes.pod_view import read_pod
from gpupool.adapters.wire.names import DEFAULT_TENANT
from gpupool.adapters.wire.reclaim_notice import notice_annotation, parse_notice
from gpupool.adapters.wire.times import parse_time
from gpupool.controllers.admission.plan import plan_admission
from gpupool.controllers.reclaim.room import (
    Placement,
    build_placement,
    plan_room_reclaim,
    waits_for_room,
)
from gpupool.domain.allocations import Slice
from gpupool.domain.units import GiB
from gpupool.quota.spec import TenantQuota
from gpupool.state.lease import LeaseRecord, PodRef
from gpupool.state.nodes import NodeObject
from gpupool.state.notice import ReclaimNotice
from gpupool.state.pods import PodView

T0 = "2026-01-01T00:00:00.000000Z"
NOW = (parse_time(T0) or 0.0) + 100.0


def at(second: int) -> str:
    return f"2026-01-01T00:00:{second:02d}.000000Z"


def pod(
    name: str,
    tenant: str,
    gib: int = 36,
    *,
    node: str | None = None,
    admitted_at: int = 1,
    borrowed: bool = False,
    preemptible: bool = False,
    exclusive: bool = False,
    unschedulable: bool = False,
    priority: int = 0,
    notice: ReclaimNotice | None = None,
    selector: dict[str, str] | None = None,
) -> PodView:
    record = {
        "at": at(admitted_at),
        "borrowed": gib * GiB if borrowed else 0,
        "preemptible": preemptible,
    }
    annotations = {
        "gpupool.io/queued-at": at(0),
        "gpupool.io/admitted": json.dumps(record),
    }
    if exclusive:
        annotations["gpupool.io/exclusive"] = "true"
    if notice is not None:
        annotations["gpupool.io/reclaim-notice"] = notice_annotation(notice)
    status: dict[str, Any] = {"phase": "Running" if node else "Pending"}
    if unschedulable:
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/2 nodes are available: insufficient memory on every card",
            }
        ]
    spec: dict[str, Any] = {
        "priority": priority,
        "containers": [
            {"name": "main", "resources": {"limits": {"gpupool.io/gpu-memory": f"{gib}Gi"}}}
        ],
    }
    if node:
        spec["nodeName"] = node
    if selector:
        spec["nodeSelector"] = selector
    return read_pod(
        {
            "metadata": {
                "name": name,
                "namespace": "ns",
                "uid": f"uid-{name}",
                "labels": {"gpupool.io/tenant": tenant},
                "annotations": annotations,
            },
            "spec": spec,
            "status": status,
        }
    )


def waiting(name: str = "a1", gib: int = 36, **kw: Any) -> PodView:
    return pod(name, "alpha", gib, admitted_at=50, unschedulable=True, **kw)


def node(name: str, cards: int = 1) -> NodeObject:
    return read_node({
        "metadata": {
            "name": name,
            "labels": {
                "gpupool.io/gpu-model": "A100-80GB",
                "gpupool.io/gpu-count": str(cards),
                "kubernetes.io/hostname": name,
            },
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    })  # fmt: skip


def record(p: PodView, offset_gib: int = 0, card: int = 0) -> LeaseRecord:
    """The GpuLease bind wrote for a placed pod: its slice on card `card` of its node."""
    assert p.node is not None and p.request is not None and p.admitted is not None
    size = p.request.gpu_memory_bytes or 0
    return LeaseRecord(
        name=p.uid,
        namespace=p.namespace,
        tenant=p.tenant,
        pod=PodRef(p.namespace, p.name, p.uid),
        node=p.node,
        slices=(Slice(card, f"GPU-{p.node}-{card}", "A100-80GB", offset_gib * GiB, size, 0),),
        amount=size,
        borrowed=p.admitted.borrowed,
        preemptible=p.admitted.preemptible,
    )


def placed(
    pods: list[PodView],
    nodes: tuple[str, ...] = ("n1", "n2"),
    gone: tuple[PodView, ...] = (),
    all_leases: bool = False,
) -> Placement:
    """The placement of `pods` (their slices laid out one after the other on card 0); `gone`:
    pods no longer listed whose leases are not released yet."""
    offsets: dict[str, int] = {}
    records = []
    for p in [*pods, *gone]:
        if p.node is None or p.request is None:
            continue
        start = offsets.get(p.node, 0)
        records.append(record(p, start))
        offsets[p.node] = start + (p.request.gpu_memory_bytes or 0) // GiB
    holders = None if all_leases else {p.uid for p in pods if p.holds_quota}
    return build_placement([node(n) for n in nodes], [], records, holders)


def marks(pods: list[PodView]) -> list[LeaseRecord]:
    return [record(p) for p in pods if p.node is not None and p.admitted is not None]


def quotas(
    alpha_nominal_gib: int = 200, beta_guaranteed_gib: int = 72, beta_nominal_gib: int = 72
) -> list[TenantQuota]:
    return [
        TenantQuota("alpha", nominal=alpha_nominal_gib * GiB, cohort="c", reclaim_grace_s=3),
        TenantQuota(
            "beta",
            nominal=beta_nominal_gib * GiB,
            guaranteed=beta_guaranteed_gib * GiB,
            cohort="c",
            reclaim_grace_s=3,
        ),
    ]


def full_cluster() -> list[PodView]:
    """n1: b1 (within quota), b3 (borrowed); n2: b2 (within quota), b4 (borrowed, newest)."""
    return [
        pod("b1", "beta", node="n1", admitted_at=1),
        pod("b2", "beta", node="n2", admitted_at=2),
        pod("b3", "beta", node="n1", admitted_at=3, borrowed=True),
        pod("b4", "beta", node="n2", admitted_at=4, borrowed=True),
    ]


def round_of(pods: list[PodView], now: float = NOW, **kw: Any) -> Any:
    return reclaim_round(
        pods, marks(pods), kw.pop("quotas", None) or quotas(), now, placement=placed(pods), **kw
    )


def names(items: Any) -> list[str]:
    return sorted(i.pod.name for i in items)


def test_the_lenders_pod_gets_one_borrowed_victim_on_the_node_where_it_then_fits() -> None:
    pods = [*full_cluster(), waiting()]
    plan = round_of(pods)
    assert names(plan.notices) == ["b4"]  # one victim is enough on either node: the newest
    [item] = plan.notices
    assert item.notice.room == "n2" and item.notice.claimant_pod == "ns/a1"
    assert item.notice.claimant == "alpha"
    assert item.notice.evict_at == NOW + 3
    assert "room on node n2 for pod ns/a1" in item.message
    assert plan.evictions == () and plan.withdrawals == ()
    annotation = json.loads(notice_annotation(item.notice))
    assert annotation["for"] == "ns/a1" and annotation["room"] == "n2"
    assert parse_notice(notice_annotation(item.notice)) == item.notice


def test_the_node_with_the_fewest_victims_is_chosen_over_the_preferred_victims() -> None:
    # a1 needs 40Gi. n1 holds b1 (plain 24Gi) and the two newest borrowed pods b3, b4 (24Gi
    # each): two victims there. n2 holds b2 (plain 24Gi) and the oldest borrowed pod b5 (48Gi):
    # one victim there, though b5 comes last in preference order.
    pods = [
        pod("b1", "beta", 24, node="n1", admitted_at=1),
        pod("b2", "beta", 24, node="n2", admitted_at=2),
        pod("b5", "beta", 48, node="n2", admitted_at=3, borrowed=True),
        pod("b3", "beta", 24, node="n1", admitted_at=4, borrowed=True),
        pod("b4", "beta", 24, node="n1", admitted_at=5, borrowed=True),
        waiting(gib=40),
    ]
    plan = round_of(pods, quotas=quotas(beta_guaranteed_gib=48, beta_nominal_gib=48))
    assert names(plan.notices) == ["b5"]
    assert plan.notices[0].notice.room == "n2"


def test_pods_within_the_borrowers_quota_are_never_taken() -> None:
    # a1 needs a whole card's 72Gi: only n1 with both b1 (within quota) and b3 gone would do.
    pods = [*full_cluster(), waiting(gib=72)]
    plan = round_of(pods)
    assert plan.notices == ()
    assert names(plan.stuck) == ["a1"] and "no node has room" in plan.stuck[0].reason


def test_never_below_guaranteed_even_for_preemptible_pods() -> None:
    # b1 is preemptible (reclaimable) but taking b1 and b3 would leave beta at 72Gi, below its
    # guaranteed 108Gi.
    pods = [
        pod("b1", "beta", node="n1", admitted_at=1, preemptible=True),
        pod("b2", "beta", node="n2", admitted_at=2),
        pod("b3", "beta", node="n1", admitted_at=3, borrowed=True),
        pod("b4", "beta", node="n2", admitted_at=4, borrowed=True),
        waiting(gib=72),
    ]
    plan = round_of(pods, quotas=quotas(beta_guaranteed_gib=108, beta_nominal_gib=108))
    assert plan.notices == ()
    plan = round_of(pods, quotas=quotas(beta_guaranteed_gib=72, beta_nominal_gib=108))
    assert names(plan.notices) == ["b1", "b3"]  # with room under the guarantee, both go


def test_exclusive_pods_are_never_taken() -> None:
    pods = [
        pod("b1", "beta", node="n1", admitted_at=1),
        pod("b2", "beta", node="n2", admitted_at=2),
        pod("b3", "beta", node="n1", admitted_at=3, borrowed=True, exclusive=True),
        pod("b4", "beta", node="n2", admitted_at=4, borrowed=True, exclusive=True),
        waiting(),
    ]
    plan = round_of(pods)
    assert plan.notices == ()


def test_nothing_while_the_pod_fits_somewhere_already() -> None:
    pods = [p for p in full_cluster() if p.name != "b4"] + [waiting()]
    plan = round_of(pods)
    assert plan.notices == () and plan.stuck == ()


def test_nothing_for_a_tenant_over_its_nominal_quota() -> None:
    pods = [*full_cluster(), waiting()]
    plan = round_of(pods, quotas=quotas(alpha_nominal_gib=24))
    assert plan.notices == ()


def test_nothing_for_a_pod_kube_scheduler_has_not_refused() -> None:
    pending = pod("a1", "alpha", admitted_at=50)  # admitted, no PodScheduled=False yet
    assert not waits_for_room(pending)
    plan = round_of([*full_cluster(), pending])
    assert plan.notices == ()


def test_a_pending_notice_is_not_doubled_and_falls_due_after_the_grace_period() -> None:
    given = ReclaimNotice(NOW, NOW + 3, "alpha", "ns/a1", room="n2")
    pods = [
        *[p for p in full_cluster() if p.name != "b4"],
        pod("b4", "beta", node="n2", admitted_at=4, borrowed=True, notice=given),
        waiting(),
    ]
    plan = round_of(pods, now=NOW + 1)
    assert plan.notices == () and plan.evictions == () and plan.withdrawals == ()
    plan = round_of(pods, now=NOW + 3)
    assert names(plan.evictions) == ["b4"] and plan.notices == ()
    assert "to make room on node n2 for pod ns/a1" in plan.evictions[0].message


def three_a_node(notice_b4: ReclaimNotice | None = None) -> list[PodView]:
    """24Gi pods, three a card: n1: b1 (within quota), b3, b5; n2: b2 (within quota), b4, b6;
    b6 is the newest borrowed pod, then b5, b4, b3."""
    return [
        pod("b1", "beta", 24, node="n1", admitted_at=1),
        pod("b2", "beta", 24, node="n2", admitted_at=2),
        pod("b3", "beta", 24, node="n1", admitted_at=3, borrowed=True),
        pod("b4", "beta", 24, node="n2", admitted_at=4, borrowed=True, notice=notice_b4),
        pod("b5", "beta", 24, node="n1", admitted_at=5, borrowed=True),
        pod("b6", "beta", 24, node="n2", admitted_at=6, borrowed=True),
    ]


def test_a_node_held_for_one_pod_is_not_used_for_another() -> None:
    # room on n2 is being made for a1 (b4 noticed): a2 does not take b6 there, though b6 is the
    # newest borrowed pod, but b5 on n1
    given = ReclaimNotice(NOW, NOW + 3, "alpha", "ns/a1", room="n2")
    pods = [*three_a_node(given), waiting("a1", 24), waiting("a2", 24)]
    plan = round_of(pods, now=NOW + 1, quotas=quotas(beta_guaranteed_gib=48, beta_nominal_gib=48))
    assert names(plan.notices) == ["b5"]
    assert plan.notices[0].notice.room == "n1"
    assert plan.notices[0].notice.claimant_pod == "ns/a2"


def test_two_waiting_pods_in_one_round_take_different_nodes() -> None:
    # n1: b1 (within quota), b3, b4; n2: b2 (within quota), b5, b6 (newest). a1 (higher
    # priority) takes b6 on n2; a2 would take b5 there next, but n2 is a1's now: b4 on n1.
    pods = [
        pod("b1", "beta", 24, node="n1", admitted_at=1),
        pod("b2", "beta", 24, node="n2", admitted_at=2),
        pod("b3", "beta", 24, node="n1", admitted_at=3, borrowed=True),
        pod("b4", "beta", 24, node="n1", admitted_at=4, borrowed=True),
        pod("b5", "beta", 24, node="n2", admitted_at=5, borrowed=True),
        pod("b6", "beta", 24, node="n2", admitted_at=6, borrowed=True),
        waiting("a1", 24, priority=1),
        waiting("a2", 24),
    ]
    plan = round_of(pods, quotas=quotas(beta_guaranteed_gib=48, beta_nominal_gib=48))
    rooms = {i.notice.claimant_pod: (i.pod.name, i.notice.room) for i in plan.notices}
    assert rooms == {"ns/a1": ("b6", "n2"), "ns/a2": ("b4", "n1")}


def test_the_notice_is_withdrawn_when_the_pod_is_placed_or_gone() -> None:
    given = ReclaimNotice(NOW, NOW + 3, "alpha", "ns/a1", room="n2")
    victim = pod("b4", "beta", node="n2", admitted_at=4, borrowed=True, notice=given)
    others = [p for p in full_cluster() if p.name != "b4"]
    placed_elsewhere = pod("a1", "alpha", node="n1", admitted_at=50)
    for pods in ([*others, victim, placed_elsewhere], [*others, victim]):
        plan = round_of(pods, now=NOW + 5)  # past the deadline: withdrawn, not evicted
        assert names(plan.withdrawals) == ["b4"] and plan.evictions == ()
        assert "reclaim for room on node n2 for pod ns/a1 withdrawn" in plan.withdrawals[0].message


def test_a_room_notice_is_not_withdrawn_for_want_of_a_quota_claimant() -> None:
    """The quota reclaim withdraws its notices when nobody in the cohort waits for quota; a room
    notice stays while its pod waits for the room."""
    given = ReclaimNotice(NOW, NOW + 3, "alpha", "ns/a1", room="n2")
    pods = [
        *[p for p in full_cluster() if p.name != "b4"],
        pod("b4", "beta", node="n2", admitted_at=4, borrowed=True, notice=given),
        waiting(),
    ]
    plan = reclaim_round(pods, marks(pods), quotas(), NOW + 1)  # no placement read
    assert plan.withdrawals == () and plan.notices == ()


def test_room_is_sought_only_among_the_cohorts_borrowers() -> None:
    # gamma is in no cohort with alpha: its borrowed-looking pods are not alpha's to take
    pods = [
        pod("b1", "beta", node="n1", admitted_at=1),
        pod("b2", "beta", node="n2", admitted_at=2),
        pod("g1", "gamma", node="n1", admitted_at=3, borrowed=True),
        pod("g2", "gamma", node="n2", admitted_at=4, borrowed=True),
        waiting(),
    ]
    qs = [*quotas(), TenantQuota("gamma", nominal=36 * GiB, cohort="other")]
    plan = round_of(pods, quotas=qs)
    assert plan.notices == ()


def test_plan_room_reclaim_skips_a_pod_already_held() -> None:
    pods = [*full_cluster(), waiting()]
    ledger = plan_admission(pods, quotas(), NOW, default_tenant=DEFAULT_TENANT).ledger
    placement = placed(pods)
    assert len(plan_room_reclaim(pods, ledger, placement, NOW).claims) == 1
    held = plan_room_reclaim(pods, ledger, placement, NOW, held={"ns/a1": "n2"})
    assert held.claims == ()


def test_only_nodes_the_pod_may_run_on_are_cleared() -> None:
    # a1 may run on n1 only (nodeSelector): b3 there goes, though b4 on n2 is preferred
    pods = [*full_cluster(), waiting(selector={"kubernetes.io/hostname": "n1"})]
    plan = round_of(pods)
    assert names(plan.notices) == ["b3"] and plan.notices[0].notice.room == "n1"


def test_nothing_when_the_only_node_the_pod_may_use_cannot_be_cleared() -> None:
    # n1 holds b1 and b2 (both within beta's quota); a1 may run on n1 only; n2's borrowed pods
    # are not its to take
    pods = [
        pod("b1", "beta", node="n1", admitted_at=1),
        pod("b2", "beta", node="n1", admitted_at=2),
        pod("b3", "beta", node="n2", admitted_at=3, borrowed=True),
        pod("b4", "beta", node="n2", admitted_at=4, borrowed=True),
        waiting(selector={"kubernetes.io/hostname": "n1"}),
    ]
    plan = round_of(pods)
    assert plan.notices == () and names(plan.stuck) == ["a1"]


def test_a_pod_that_fits_only_where_it_may_not_run_still_gets_room() -> None:
    # n2 has room but a1 may not run there: room is made on n1
    pods = [
        *[p for p in full_cluster() if p.name != "b4"],
        waiting(selector={"kubernetes.io/hostname": "n1"}),
    ]
    plan = round_of(pods)
    assert names(plan.notices) == ["b3"] and plan.notices[0].notice.room == "n1"


def test_a_victim_gone_whose_lease_is_not_released_yet_leaves_room_nobody_else_pays_for() -> None:
    # b4 was evicted for a1 (pod gone, its notice with it); its GpuLease still holds n2's card
    # until the lease controller releases it. a1 fits there already: nobody else is noticed.
    cluster = full_cluster()
    gone = next(p for p in cluster if p.name == "b4")
    pods = [*[p for p in cluster if p.name != "b4"], waiting()]
    plan = reclaim_round(pods, marks(pods), quotas(), NOW, placement=placed(pods, gone=(gone,)))
    assert plan.notices == () and plan.stuck == ()
    # were the lease counted as holding the card, b3 would be evicted as well
    plan = reclaim_round(
        pods, marks(pods), quotas(), NOW, placement=placed(pods, gone=(gone,), all_leases=True)
    )
    assert names(plan.notices) == ["b3"]
