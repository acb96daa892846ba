"""Reclaim for room: victims chosen where evicting them lets the lender's pod fit."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import event, given, settings
from hypothesis import strategies as st
from quota_builders import G, lease, ledger_of, tenant

from gpupool.quota.book import QuotaBook
from gpupool.quota.lease import Lease
from gpupool.quota.ledger import Ledger
from gpupool.quota.reclaim import NoReclaim, _freed
from gpupool.quota.reclaim_sites import SitePlan, plan_site_reclaim
from gpupool.quota.resource import Resource
from gpupool.quota.spec import TenantQuota


class Sites:
    """A toy cluster: each site has free room; a pod of `demand` fits where room + gone >= it."""

    def __init__(self, free: dict[str, int], demand: int) -> None:
        self.free = free
        self.demand = demand
        self.where: dict[str, str] = {}
        self.asked = 0

    def put(self, le: Lease, site: str) -> Lease:
        self.where[le.id] = site
        return le

    def site_of(self, le: Lease) -> str | None:
        return self.where.get(le.id)

    def fits(self, site: str, gone: Sequence[Lease]) -> bool:
        self.asked += 1
        freed = sum(le.amount for le in gone if self.where.get(le.id) == site)
        return self.free[site] + freed >= self.demand


def test_victims_on_one_node_not_the_preferred_spread_ones() -> None:
    # b borrowed 3G spread over nodes x and y (newest first would take those), and 4G on z;
    # the lender's 4G pod fits only where 4G are freed at once: on z
    ledger = ledger_of(tenant("lender", 10 * G), tenant("b", 0))
    sites = Sites({"x": 1 * G, "y": 1 * G, "z": 0}, demand=4 * G)
    on_z = sites.put(lease("b", 4 * G, at=1, borrowed=True), "z")
    on_x = sites.put(lease("b", 2 * G, at=5, borrowed=True), "x")
    on_y = sites.put(lease("b", 1 * G, at=6, borrowed=True), "y")
    for le in (on_z, on_x, on_y):
        ledger.add(le)
    plan = plan_site_reclaim(ledger, "lender", sites.site_of, sites.fits, now=10.0)
    assert isinstance(plan, SitePlan)
    # x has 1G free + 2G freed = 3G < 4G; only z works
    assert plan.site == "z"
    assert [n.lease_id for n in plan.plan.notices] == [on_z.id]
    assert plan.plan.notices[0].evict_at == 10.0 + 30.0


def test_fewest_victims_then_most_preferred_site() -> None:
    ledger = ledger_of(tenant("lender", 10 * G), tenant("b", 0))
    sites = Sites({"x": 0, "y": 0}, demand=2 * G)
    x1 = sites.put(lease("b", 1 * G, at=8, borrowed=True), "x")
    x2 = sites.put(lease("b", 1 * G, at=9, borrowed=True), "x")
    y1 = sites.put(lease("b", 2 * G, at=1, borrowed=True), "y")
    for le in (x1, x2, y1):
        ledger.add(le)
    plan = plan_site_reclaim(ledger, "lender", sites.site_of, sites.fits, now=0.0)
    assert isinstance(plan, SitePlan)
    assert plan.site == "y" and [n.lease_id for n in plan.plan.notices] == [y1.id]


def test_never_below_guaranteed_nor_an_unborrowed_lease() -> None:
    ledger = ledger_of(tenant("lender", 10 * G), tenant("b", 2 * G, guaranteed=2 * G))
    sites = Sites({"x": 0}, demand=2 * G)
    plain = sites.put(lease("b", 2 * G, at=0), "x")
    borrowed = sites.put(lease("b", 1 * G, at=1, borrowed=True), "x")
    ledger.add(plain)
    ledger.add(borrowed)
    plan = plan_site_reclaim(ledger, "lender", sites.site_of, sites.fits, now=0.0)
    # evicting the borrowed 1G frees only 1G at x; the plain lease is never a victim
    assert isinstance(plan, NoReclaim)
    assert "no node has room" in plan.reason


def test_quota_shortage_is_topped_up_from_elsewhere_and_pending_is_not_room() -> None:
    ledger = ledger_of(tenant("lender", 10 * G), tenant("b", 0))
    sites = Sites({"x": 0, "y": 0}, demand=1 * G)
    x1 = sites.put(lease("b", 1 * G, at=1, borrowed=True), "x")
    y1 = sites.put(lease("b", 2 * G, at=2, borrowed=True), "y")
    y2 = sites.put(lease("b", 2 * G, at=3, borrowed=True), "y")
    for le in (x1, y1, y2):
        ledger.add(le)
    # y2 is already under notice for someone else: not room for this pod, but it frees quota
    plan = plan_site_reclaim(
        ledger, "lender", sites.site_of, sites.fits, now=0.0, needed=4 * G, pending={y2.id}
    )
    assert isinstance(plan, SitePlan)
    ids = {n.lease_id for n in plan.plan.notices}
    assert y2.id not in ids
    # at y, y1 alone makes room and with y2 frees the 4G the pool lacks; at x, x1 makes room
    # but must be topped up with y1: y wins with one victim
    assert plan.site == "y" and ids == {y1.id}
    assert plan.plan.freed == 2 * G
    plan = plan_site_reclaim(ledger, "lender", sites.site_of, sites.fits, 0.0, needed=5 * G)
    assert isinstance(plan, SitePlan)
    assert {n.lease_id for n in plan.plan.notices} == {x1.id, y1.id, y2.id}
    plan = plan_site_reclaim(
        ledger, "lender", sites.site_of, sites.fits, 0.0, needed=6 * G, pending={y2.id}
    )
    assert isinstance(plan, NoReclaim)


def test_no_cohort() -> None:
    ledger = Ledger(QuotaBook([TenantQuota(name="solo", nominal=G)]))
    sites = Sites({}, demand=1)
    assert isinstance(plan_site_reclaim(ledger, "solo", sites.site_of, sites.fits, 0.0), NoReclaim)


@st.composite
def cohorts(draw: st.DrawFn) -> list[TenantQuota]:
    out = []
    for i in range(draw(st.integers(2, 4))):
        nominal = draw(st.integers(0, 20))
        out.append(
            TenantQuota(
                name=f"t{i}",
                nominal=nominal,
                guaranteed=draw(st.integers(0, nominal)),
                resource=Resource.GPU,
                cohort="c",
                priority=draw(st.integers(0, 2)),
            )
        )
    return out


@settings(max_examples=200, deadline=None)
@given(
    cohorts(),
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(1, 8), st.integers(0, 2), st.booleans()),
        max_size=25,
    ),
    st.lists(st.integers(0, 6), min_size=3, max_size=3),
    st.integers(0, 3),
    st.integers(1, 10),
    st.one_of(st.just(0), st.integers(1, 10)),
)
def test_site_reclaim_takes_only_borrowed_and_the_claimant_fits(
    qs: list[TenantQuota],
    held: list[tuple[int, int, int, bool]],
    free: list[int],
    claimant_i: int,
    demand: int,
    needed: int,
) -> None:
    ledger = Ledger(QuotaBook(qs))
    sites = Sites({f"s{k}": room for k, room in enumerate(free)}, demand)
    for n, (who, amount, site, preemptible) in enumerate(held):
        name = qs[who % len(qs)].name
        over = ledger.used(name) + amount > qs[who % len(qs)].nominal
        le = Lease(
            id=f"l{n}",
            tenant=name,
            amount=amount,
            reserved_at=float(n),
            priority=n % 3,
            borrowed=over,
            preemptible=preemptible and not over,
        )
        ledger.add(sites.put(le, f"s{site % 3}"))
    claimant = qs[claimant_i % len(qs)].name
    plan = plan_site_reclaim(ledger, claimant, sites.site_of, sites.fits, 50.0, needed)
    event("no plan" if isinstance(plan, NoReclaim) else f"{len(plan.plan.notices) > 0} victims")
    if isinstance(plan, NoReclaim):
        return
    victims = [ledger.lease(n.lease_id) for n in plan.plan.notices]
    chosen = [v for v in victims if v is not None]
    assert len(chosen) == len(victims)
    taken: dict[str, int] = {}
    for victim in chosen:
        # never a lease that was not borrowed (or admitted as preemptible), never the claimant's
        assert victim.reclaimable and victim.tenant != claimant
        assert victim.borrowed or victim.preemptible
        taken[victim.tenant] = taken.get(victim.tenant, 0) + victim.amount
    for name, amount in taken.items():
        # guaranteed usage is never reclaimed
        assert ledger.used(name) - amount >= ledger.book[name].guaranteed
    # after the reclaim the claimant fits at the chosen site, and the pool frees what it lacked
    assert sites.fits(plan.site, chosen)
    assert _freed(ledger, chosen) >= needed
    # without a quota shortage, no victim could have been spared
    for victim in chosen if needed == 0 else []:
        assert not sites.fits(plan.site, [v for v in chosen if v.id != victim.id])
