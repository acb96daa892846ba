"""Idle lending in the replay: the same trace with lenders' idle time 0 (borrow at once) and
300 s (borrow only quota unused that long): borrowing starts later and the borrower waits."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupool.domain.devices import uniform_node
from gpupool.domain.requests import Request
from gpupool.placement import TargetWorkload
from gpupool.quota.resource import Resource
from gpupool.quota.spec import TenantQuota
from gpupool.simulator.openb import TracePod
from gpupool.simulator.replay import Engine
from gpupool.simulator.replay_jobs import make_jobs
from gpupool.simulator.tenancy import Tenancy, TenantRule

NODES = [
    uniform_node(f"n{i}", cpu_milli=64000, memory_mib=262144, gpu_count=2, model="T4")
    for i in range(2)
]


def pod(name: str, at: float, run: float, qos: str) -> TracePod:
    return TracePod(
        request=Request(name=name, cpu_milli=1000, gpu_count=1, gpu_milli=1000),
        creation_time=at,
        deletion_time=at + run,
        scheduled_time=at,
        qos=qos,
    )


# a (LS) runs two cards until t=100; b (BE) then wants all four cards from t=110 for 1000 s
PODS = [pod(f"a{i}", 0.0, 100.0, "LS") for i in range(2)]
PODS += [pod(f"b{i}", 110.0, 1000.0, "BE") for i in range(4)]
PODS.append(pod("tail", 500.0, 1.0, "LS"))  # keeps the arrival window open past the idle time


def run(idle_s: float) -> dict[str, object]:
    a = TenantQuota("a", nominal=2000, resource=Resource.GPU, cohort="c")
    b = TenantQuota("b", nominal=2000, resource=Resource.GPU, cohort="c")
    ten = Tenancy(
        rules=(TenantRule(replace(a, lend_after_idle_s=idle_s), ("LS",)), TenantRule(b, None))
    )
    jobs, _ = make_jobs(PODS, ten, 1.0, whole_card=False)
    wl = TargetWorkload.from_requests([p.request for p in PODS])
    return Engine.create("pooled-borrowing", NODES, jobs, ten, "best-fit", wl).run().to_json()


def test_idle_lending_delays_borrowing_until_the_quota_has_been_idle_that_long() -> None:
    at_once, idle = run(0.0), run(300.0)
    b_now, b_idle = at_once["tenants"]["b"], idle["tenants"]["b"]  # type: ignore[index]
    # at once: b's two pods beyond its nominal borrow a's cards at t=110, no wait; with 300 s
    # they wait until t=400 (a's jobs ended at 100, plus 300 s): 290 s
    assert b_now["queue_delay_s_p95"] == 0.0
    assert b_idle["queue_delay_s_p95"] == pytest.approx(290.0)
    assert b_idle["borrowed_gpu_hours"] < b_now["borrowed_gpu_hours"]
    assert idle["gpu_allocation_pct_mean"] < at_once["gpu_allocation_pct_mean"]  # type: ignore[operator]
