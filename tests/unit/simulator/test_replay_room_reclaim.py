"""Reclaim for room: a lender admitted by quota but without a card gets one from borrowers."""

from __future__ import annotations

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from gpupool.domain.devices import uniform_node
from gpupool.domain.requests import Request
from gpupool.placement import ClusterSnapshot, Decision, Planner, Reason, TargetWorkload
from gpupool.placement.filters import feasibility
from gpupool.quota.admission import Admit, Ask, decide
from gpupool.quota.book import QuotaBook
from gpupool.quota.lease import Lease
from gpupool.quota.ledger import Ledger
from gpupool.quota.reclaim import ReclaimPlan, plan_reclaim
from gpupool.quota.reclaim_sites import SitePlan
from gpupool.quota.resource import Resource
from gpupool.quota.spec import TenantQuota
from gpupool.simulator.builtin import builtin_nodes
from gpupool.simulator.builtin_timeline import builtin_tenancy, builtin_timeline
from gpupool.simulator.openb import TracePod
from gpupool.simulator.replay import Engine
from gpupool.simulator.replay_experiment import ReplayConfig, run_experiment
from gpupool.simulator.replay_jobs import make_jobs
from gpupool.simulator.replay_reclaim import fits_without, room_bound, room_plan
from gpupool.simulator.tenancy import Tenancy, TenantRule

NODES = [
    uniform_node(f"n{i}", cpu_milli=64000, memory_mib=262144, gpu_count=2, model="T4")
    for i in range(2)
]


def share(name: str, milli: int) -> Request:
    return Request(name=name, cpu_milli=1000, gpu_count=1, gpu_milli=milli)


def quota(name: str, nominal: int, guaranteed: int = 0) -> TenantQuota:
    return TenantQuota(
        name=name, nominal=nominal, guaranteed=guaranteed, resource=Resource.GPU, cohort="c"
    )


def put(snap: ClusterSnapshot, req: Request, node: int, card: int) -> Decision:
    mem = int(snap.gmem_total[node, card]) * (req.gpu_milli or 0) // 1000
    offset = int(snap.gmem_total[node, card] - snap.gmem_free[node, card])
    decision = Decision(
        req, node, snap.names[node], (card,), (mem,), (req.gpu_milli or 0,), (offset,), 0.0
    )
    snap.assume(decision)
    return decision


def test_room_goes_where_the_pod_fits_not_to_the_newest_borrowed_lease() -> None:
    ledger = Ledger(QuotaBook([quota("a", 1000), quota("b", 2000)]))
    snap = ClusterSnapshot.from_nodes(NODES)
    decisions: dict[str, Decision] = {}
    # (lease, node, card, milli, borrowed, reserved_at)
    layout = [
        ("a1", 0, 0, 600, False, 0.0),
        ("a2", 1, 0, 400, False, 1.0),
        ("a3", 0, 1, 500, True, 5.0),
        ("a4", 1, 1, 500, True, 6.0),
        ("a5", 1, 0, 500, True, 7.0),  # newest: n1's card 0 then holds 900
    ]
    for lease_id, node, card, milli, borrowed, at in layout:
        decisions[lease_id] = put(snap, share(lease_id, milli), node, card)
        ledger.add(Lease(lease_id, "a", milli, at, borrowed=borrowed, gpu_milli=milli))
    claim = share("b-pod", 1000)
    assert feasibility(snap, claim).nodes.size == 0  # no card has a whole GPU free
    before = snap.state_key()
    # quota alone would evict the newest borrowed lease, a5, which frees no whole card
    quota_plan = plan_reclaim(ledger, "b", 500, now=0.0)
    assert isinstance(quota_plan, ReclaimPlan)
    assert [n.lease_id for n in quota_plan.notices] == ["a5"]
    plan = room_plan(snap, ledger, decisions.get, set(), claim, "b", now=0.0)
    assert snap.state_key() == before  # the what-if left the snapshot as it was
    assert isinstance(plan, SitePlan)
    assert (plan.site, [n.lease_id for n in plan.plan.notices]) == (1, ["a4"])
    # with node 1 held for someone else, the room comes from node 0
    plan = room_plan(snap, ledger, decisions.get, {1}, claim, "b", now=0.0)
    assert isinstance(plan, SitePlan)
    assert (plan.site, [n.lease_id for n in plan.plan.notices]) == (0, ["a3"])
    # and it frees the quota the claimant lacks as well when asked: a4 + a5 free 1000m
    plan = room_plan(snap, ledger, decisions.get, set(), claim, "b", now=0.0, needed=1000)
    assert isinstance(plan, SitePlan)
    assert {n.lease_id for n in plan.plan.notices} == {"a4", "a5"}


def pod(name: str, milli: int, at: float, run: float, qos: str) -> TracePod:
    return TracePod(
        request=share(name, milli),
        creation_time=at,
        deletion_time=at + run,
        scheduled_time=at,
        qos=qos,
    )


def run(mode: str, pods: list[TracePod]) -> dict[str, object]:
    ten = Tenancy(rules=(TenantRule(quota("a", 2000), ("LS",)), TenantRule(quota("b", 2000), None)))
    if mode != "pooled-borrowing":
        ten = ten.without_borrowing()
    jobs, _ = make_jobs(pods, ten, 1.0, whole_card=False)
    wl = TargetWorkload.from_requests([p.request for p in pods])
    return Engine.create(mode, NODES, jobs, ten, "best-fit", wl).run().to_json()


def test_lender_within_quota_gets_a_card_back_after_the_grace_period() -> None:
    # a fills every card with 750m (two pods borrowed); b, within its quota, asks for a whole
    # card: quota admits it, no card has room, so one borrowed pod is evicted after 30 s
    pods = [pod(f"a{i}", 750, 0.0, 1000.0, "LS") for i in range(4)]
    pods.append(pod("b0", 1000, 10.0, 100.0, "BE"))
    out = run("pooled-borrowing", pods)
    tenants = out["tenants"]
    assert isinstance(tenants, dict)
    assert out["reclaims"] == 1 and out["reclaims_for_room"] == 1
    assert tenants["b"]["queue_delay_s_p50"] == 30.0  # placed as soon as its room was freed
    assert tenants["a"]["admitted"] == 4
    # without borrowing a never holds b's quota share, so b finds a card at once
    pooled = run("pooled", pods)
    assert pooled["reclaims"] == 0
    assert (
        isinstance(pooled["tenants"], dict) and pooled["tenants"]["b"]["queue_delay_s_p50"] == 0.0
    )


def test_notices_are_withdrawn_when_the_claimant_finds_room_before_the_eviction() -> None:
    # as above, but one of a's pods ends at t=20, before the eviction due at t=40: b takes that
    # card at once and the borrowed pod under notice keeps running
    pods = [pod("a0", 750, 0.0, 20.0, "LS")]
    pods += [pod(f"a{i}", 750, 0.0, 1000.0, "LS") for i in range(1, 4)]
    pods.append(pod("b0", 1000, 10.0, 100.0, "BE"))
    out = run("pooled-borrowing", pods)
    tenants = out["tenants"]
    assert isinstance(tenants, dict)
    assert out["reclaims"] == 0
    assert tenants["b"]["queue_delay_s_p50"] == 10.0
    assert tenants["a"]["gpu_hours"] == pytest.approx((20 + 3 * 1000) * 0.75 / 3600, abs=1e-3)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 1), st.sampled_from([250, 400, 500, 750, 1000])), max_size=14
    ),
    st.sampled_from([500, 750, 1000]),
    st.integers(0, 1000),
)
def test_after_a_room_reclaim_the_claimant_fits_and_only_borrowed_leases_go(
    pods: list[tuple[int, int]], claim_milli: int, guaranteed: int
) -> None:
    book = QuotaBook([quota("a", 1500, min(guaranteed, 1500)), quota("b", 2500)])
    ledger = Ledger(book)
    snap = ClusterSnapshot.from_nodes(NODES)
    planner = Planner("best-fit", TargetWorkload.from_requests([share("x", 500)]))
    decisions: dict[str, Decision] = {}
    for k, (who, milli) in enumerate(pods):
        tenant = "ab"[who]
        req = share(f"p{k}", milli)
        verdict = decide(ledger, Ask(tenant, milli), float(k))
        decision = planner.plan(snap, req)
        if not isinstance(verdict, Admit) or not isinstance(decision, Decision):
            continue
        snap.assume(decision)
        decisions[req.name] = decision
        ledger.add(
            Lease(req.name, tenant, milli, float(k), borrowed=verdict.borrowed, gpu_milli=milli)
        )
    claim = share("claim", claim_milli)
    if isinstance(planner.plan(snap, claim), Decision) or ledger.used("b") + claim_milli > 2500:
        event("claim fits or is over quota")
        return
    before = snap.state_key()
    plan = room_plan(snap, ledger, decisions.get, set(), claim, "b", now=0.0)
    assert snap.state_key() == before
    event("room plan" if isinstance(plan, SitePlan) else "no room plan")
    if not isinstance(plan, SitePlan):
        return
    victims = [ledger.lease(n.lease_id) for n in plan.plan.notices]
    assert victims and all(v is not None and v.tenant == "a" and v.borrowed for v in victims)
    taken = sum(v.amount for v in victims if v is not None)
    assert ledger.used("a") - taken >= book["a"].guaranteed  # guaranteed is never reclaimed
    for v in victims:
        assert v is not None
        snap.forget(decisions[v.id])
    assert int(feasibility(snap, claim).reason[plan.site]) == int(Reason.FITS)
    assert isinstance(planner.plan(snap, claim), Decision)


def test_builtin_day_shows_research_borrowing_and_inference_reclaiming_room() -> None:
    nodes = builtin_nodes()
    config = ReplayConfig(time_scale=1.0, cluster_fraction=1.0, modes=("pooled-borrowing",))
    result = run_experiment(nodes, builtin_timeline(), builtin_tenancy(nodes), config)
    out = result.to_json()["runs"]
    assert isinstance(out, dict)
    run_ = out["pooled-borrowing"]
    assert run_["reclaims"] > 0 and run_["reclaims_for_room"] > 0
    tenants = run_["tenants"]
    assert tenants["research"]["borrowed_gpu_hours"] > 0
    for team in ("search", "ads", "assistant"):
        assert tenants[team]["borrowed_gpu_hours"] == 0.0  # the inference teams only lend
        # within their quota, they wait at most about one grace period (60 s) for room
        assert tenants[team]["queue_delay_s_p99"] <= 120.0


@st.composite
def requests(draw: st.DrawFn, name: str) -> Request:
    kind = draw(st.sampled_from(["share", "whole", "bytes"]))
    cpu = draw(st.sampled_from([1000, 8000, 40000]))
    if kind == "share":
        return share(name, draw(st.sampled_from([100, 250, 500, 750])))
    if kind == "whole":
        return Request(name=name, cpu_milli=cpu, gpu_count=draw(st.integers(1, 2)), gpu_milli=1000)
    gib = draw(st.sampled_from([2, 4, 8, 12]))
    pct = draw(st.sampled_from([10, 30, 50]))
    return Request(
        name=name, cpu_milli=cpu, gpu_count=1, gpu_memory_bytes=gib << 30, compute_pct=pct
    )


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_room_bound_never_rules_out_what_the_filters_accept(data: st.DataObject) -> None:
    snap = ClusterSnapshot.from_nodes(NODES)
    planner = Planner("best-fit", TargetWorkload.from_requests([share("x", 500)]))
    placed: list[Decision] = []
    for k in range(data.draw(st.integers(2, 14))):
        decision = planner.plan(snap, data.draw(requests(f"p{k}")))
        if isinstance(decision, Decision):
            snap.assume(decision)
            placed.append(decision)
    gone = [d for d in placed if data.draw(st.booleans())]
    claim = data.draw(requests("claim"))
    for node in range(len(NODES)):
        here = [d for d in gone if d.node_index == node]
        bound = room_bound(snap, node, claim, here)
        before = int(feasibility(snap, claim).reason[node]) == int(Reason.FITS)
        for d in here:
            snap.forget(d)
        exact = int(feasibility(snap, claim).reason[node]) == int(Reason.FITS)
        for d in reversed(here):
            snap.assume(d)
        if here:
            event(f"fits before {before}, after {exact}, bound {bound}")
        assert bound or not exact
        assert fits_without(snap, node, claim, gone) == exact
