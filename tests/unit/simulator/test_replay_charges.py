"""The replay charges every lease what its slices hold, as the live bind does: a byte slice is
admitted for the most it may take (the smallest card that takes it) and its lease is charged
what it holds on the card it got; a slice on each of several cards holds each of them."""

from __future__ import annotations

import pytest

from gpupool.domain.devices import uniform_node
from gpupool.domain.requests import MILLI, Request
from gpupool.domain.units import GiB
from gpupool.placement import ClusterSnapshot, Decision, TargetWorkload
from gpupool.quota.resource import Resource
from gpupool.quota.spec import TenantQuota
from gpupool.simulator.lease_export import ExportingEngine
from gpupool.simulator.openb import TracePod
from gpupool.simulator.replay_jobs import Job, make_jobs
from gpupool.simulator.replay_leases import ChargeMismatch, held_milli, lease_for, most_milli
from gpupool.simulator.tenancy import Tenancy, TenantRule

NODES = [
    uniform_node("big", cpu_milli=64000, memory_mib=262144, gpu_count=4, model="A100-80GB"),
    uniform_node("small", cpu_milli=64000, memory_mib=262144, gpu_count=4, model="T4"),
]


def trace_pod(name: str, req: Request, at: float) -> TracePod:
    return TracePod(request=req, creation_time=at, deletion_time=at + 50, scheduled_time=at)


def test_every_lease_is_charged_what_its_slices_hold() -> None:
    requests = [
        Request("bytes", cpu_milli=1000, gpu_count=1, gpu_memory_bytes=12 * GiB, compute_pct=20),
        Request("multi", cpu_milli=1000, gpu_count=3, gpu_memory_bytes=4 * GiB),
        Request("big", cpu_milli=1000, gpu_count=2, gpu_memory_bytes=30 * GiB),
        Request("share", cpu_milli=1000, gpu_count=2, gpu_milli=250),
        Request("whole", cpu_milli=1000, gpu_count=2),
    ]
    pods = [trace_pod(f"{r.name}-{i}", r, float(i)) for i, r in enumerate(requests * 4)]
    quota = TenantQuota("a", nominal=8 * MILLI, resource=Resource.GPU)
    tenancy = Tenancy(rules=(TenantRule(quota, None),))
    jobs, _ = make_jobs(pods, tenancy, 1.0, whole_card=False)
    workload = TargetWorkload.from_requests(requests)
    engine = ExportingEngine.create("pooled", NODES, jobs, tenancy, "best-fit", workload)
    assert isinstance(engine, ExportingEngine)
    engine.run()
    assert len(engine.ended) == len(pods)
    for ended in engine.ended:
        d = ended.decision
        held = 0
        for card, size in zip(d.cards, d.mem_bytes, strict=True):
            total = int(engine.snap.gmem_total[d.node_index, card])
            held += min(MILLI, -(-size * MILLI // total))
        assert ended.lease.amount == held, ended
        assert len(set(d.cards)) == d.request.gpu_count
    # a 12Gi slice may hold 80% of a T4 (15Gi), so it is admitted for that much; on an
    # A100 it is charged 150m
    assert most_milli(engine.snap, requests[0]) == 800


def test_a_holding_above_the_admitted_amount_is_refused() -> None:
    snap = ClusterSnapshot(NODES)
    req = Request("p", cpu_milli=1000, gpu_count=1, gpu_memory_bytes=12 * GiB)
    d = Decision(req, 1, "small", (0,), (12 * GiB,), (0,), (0,), 0.0)
    job = Job(id="p", request=req, share_milli=0, tenant="a", arrival=0.0, duration=1.0)
    assert held_milli(snap, d) == 800  # 12Gi of a T4's 15Gi
    with pytest.raises(ChargeMismatch, match="admitted for 150m"):
        lease_for(job, d, snap, "p@1", 0.0, 150, False, False, None)
