"""A gang in the replay: the same quota core (`quota.gang`) and the same what-if
(`placement.whatif.place_together`) as the live system. Four 1-GPU members of a gang arrive
while only three cards are free: none starts until the fourth card frees, then all four start at
once; a gang that no card set can ever hold, or over its tenant's quota for good, is rejected."""

from __future__ import annotations

from gpupool.domain.devices import uniform_node
from gpupool.domain.requests import Request
from gpupool.placement import TargetWorkload
from gpupool.quota.resource import Resource
from gpupool.quota.spec import TenantQuota
from gpupool.simulator.replay import Engine
from gpupool.simulator.replay_jobs import Job
from gpupool.simulator.tenancy import Tenancy, TenantRule

NODES = [
    uniform_node(f"n{i}", cpu_milli=64000, memory_mib=262144, gpu_count=2, model="T4")
    for i in range(2)
]


def job(name: str, at: float, run: float, gang: str | None = None, size: int = 0) -> Job:
    request = Request(name=name, cpu_milli=1000, gpu_count=1, gpu_milli=1000, tenant="a")
    return Job(name, request, 1000, "a", at, run, gang=gang, gang_size=size)


def engine(jobs: list[Job], nominal: int = 8000) -> Engine:
    ten = Tenancy(
        rules=(TenantRule(TenantQuota("a", nominal=nominal, resource=Resource.GPU), None),)
    )
    wl = TargetWorkload.from_requests([j.request for j in jobs])
    return Engine.create("pooled", NODES, jobs, ten, "best-fit", wl)


JOBS = [
    job("solo", 0.0, 100.0),  # holds one of the four cards until t=100
    *(job(f"g{i}", 10.0 + i, 50.0, gang="train", size=4) for i in range(4)),
]


def gang_running(e: Engine) -> set[str]:
    return {r.job.id for r in e.running.values() if r.job.gang == "train"}


def test_no_member_starts_until_all_fit_then_all_start_together() -> None:
    e = engine(JOBS)
    e.run(until=99.0)
    assert gang_running(e) == set()  # three cards free for 86 s: never half the gang
    assert e.queue_ids() == ["g0", "g1", "g2", "g3"]
    e.run(until=101.0)
    assert gang_running(e) == {"g0", "g1", "g2", "g3"}
    assert {le.gang for le in e.ledger} == {"train"}
    stats = e.run().to_json()
    assert stats["tenants"]["a"]["admitted"] == 5  # type: ignore[index]


def test_a_gang_over_its_quota_for_good_is_rejected_whole() -> None:
    stats = engine(JOBS[1:], nominal=3000).run().to_json()
    assert stats["tenants"]["a"]["admitted"] == 0  # type: ignore[index]
