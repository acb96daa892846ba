"""Each loop's next deadline, pure: the time its timed work comes due that no watched change
announces (a heartbeat growing old, an expiry, a grace's end, a reservation's timeout, a
retention's end), and None when it has none (an idle cluster costs no round)."""

from __future__ import annotations

from dataclasses import replace

from gpupool.controllers.due import soonest
from gpupool.controllers.leases.due import lease_due
from gpupool.controllers.node_health.plan import next_check
from gpupool.domain.allocations import Slice
from gpupool.domain.devices import Gpu
from gpupool.quota.lease import LeasePhase
from gpupool.quota.spec import Budget
from gpupool.state.lease import LeaseRecord, PodRef
from gpupool.state.nodes import GpuNodeObject
from gpupool.state.notice import ReclaimNotice
from gpupool.state.pods import PodView

T0 = 1_700_000_000.0


def node(name: str, health: str = "Healthy") -> GpuNodeObject:
    return GpuNodeObject(name, gpus=(Gpu(index=0, model="A100-80GB", uuid=f"GPU-{name}"),),
                         health=health)  # fmt: skip


def test_soonest_of_none_is_none() -> None:
    assert soonest(None, None) is None
    assert soonest(None, 5.0, 3.0) == 3.0


def test_node_health_comes_due_when_the_oldest_heartbeat_grows_suspect() -> None:
    nodes = [node("n1"), node("n2"), node("never")]
    beats = {"n1": T0, "n2": T0 + 7}
    assert next_check(nodes, beats, T0 + 10, suspect_s=90, lost_s=180) == T0 + 90
    # n1 silent past suspect (this round writes Suspect): its next is the lost threshold
    assert next_check(nodes[1:], beats, T0 + 95, suspect_s=90, lost_s=180) == T0 + 97
    assert next_check([nodes[0]], beats, T0 + 95, suspect_s=90, lost_s=180) == T0 + 180


def test_a_suspect_or_lost_node_is_looked_at_again_soon_for_its_return() -> None:
    beats = {"n1": T0}
    for health in ("Suspect", "Lost"):
        at = next_check([node("n1", health)], beats, T0 + 200, suspect_s=90, lost_s=180,
                        recheck_s=5)  # fmt: skip
        assert at == T0 + 205


def test_nodes_that_never_heartbeat_give_no_deadline() -> None:
    assert next_check([node("n1")], {}, T0) is None
    assert next_check([], {"n1": T0}, T0) is None


def lease(phase: LeasePhase = LeasePhase.ACTIVE, **kw: object) -> LeaseRecord:
    card = Slice(0, "GPU-0", "A100-80GB", 0, 2**30, 0)
    base = LeaseRecord("l", "ns", "alpha", PodRef("ns", "p", "uid-p"), "n1", (card,),
                       phase=phase, start=T0)  # fmt: skip
    return replace(base, **kw)  # type: ignore[arg-type]


def pod(**kw: object) -> PodView:
    base = PodView(namespace="ns", name="p", uid="uid-p", tenant="alpha", priority=0,
                   submitted_at=T0, request=None, problem=None, gated=False, gate_index=-1,
                   phase="Running", deleting=False, node="n1", admitted=None,
                   queue_note=None)  # fmt: skip
    return replace(base, **kw)  # type: ignore[arg-type]


def due(leases: list[LeaseRecord], now: float, pods: dict[str, PodView] | None = None,
        budgets: dict[str, Budget] | None = None) -> float | None:  # fmt: skip
    """The soonest of the leases' own deadlines (the lease loop keeps one per lease)."""
    by_uid = pods or {}
    times = (
        lease_due(le, by_uid.get(le.pod.uid), now, retention_s=3600, reserved_timeout_s=120,
                  budgets=budgets)
        for le in leases
    )  # fmt: skip
    return soonest(*times)


def test_an_idle_active_lease_without_expiry_has_no_deadline() -> None:
    assert due([lease()], T0 + 50, {"uid-p": pod()}) is None


def test_the_lease_loop_comes_due_at_the_soonest_expiry_timeout_or_collection() -> None:
    expiring = lease(expiry=T0 + 300)
    reserved = lease(LeasePhase.RESERVED)  # swept 120 s after its start if still unbound
    ended = lease(LeasePhase.RELEASED, end=T0 + 10)
    assert due([expiring], T0 + 50) == T0 + 300
    assert due([expiring, reserved], T0 + 50) == T0 + 120
    assert due([ended], T0 + 50) == T0 + 10 + 3600
    assert due([expiring, reserved, ended], T0 + 200) == T0 + 300  # past times wait on others


def test_an_ended_lease_is_collected_no_sooner_than_its_budget_window_ends() -> None:
    ended = lease(LeasePhase.RELEASED, end=T0 + 10)
    day = Budget(limit=100, window_s=86_400)
    at = due([ended], T0 + 50, budgets={"alpha": day})
    assert at == max(T0 + 10 + 3600, day.window_end(T0 + 10)) and at > T0 + 3610


def test_an_expiry_notice_comes_due_at_its_eviction_and_is_retried_once_past() -> None:
    noticed = pod(expiry_notice=ReclaimNotice(T0 + 300, T0 + 330, "alpha", "ns/p"))
    expired = lease(expiry=T0 + 300)
    assert due([expired], T0 + 310, {"uid-p": noticed}) == T0 + 330
    assert due([expired], T0 + 340, {"uid-p": noticed}) == T0 + 345  # refused (429): again
