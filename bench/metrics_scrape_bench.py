"""Cost of one /metrics scrape of the agent and of the controller at 1,000 leases: CPU time per
scrape (the collector building its families and prometheus_client writing the text), and bytes.

    .venv/bin/python bench/metrics_scrape_bench.py [--leases 1000] [--repeat 50]

Prints JSON. The agent's reading is one node of 8 cards with the leases spread over them (more
than a node holds in practice: 10 per card is the device plugin's default); the controller's is
100 tenants and 125 nodes of 8 cards. The lease listing itself (one API call) is not counted.
"""

from __future__ import annotations

import argparse
import json
import time

from prometheus_client import CollectorRegistry, generate_latest

from gpupool.adapters.metrics.agent import AgentCollector, AgentReading
from gpupool.adapters.metrics.controller import (
    Admission,
    CardReading,
    ControllerMetrics,
    ControllerReading,
    TenantReading,
)
from gpupool.domain.allocations import Slice
from gpupool.node.nvml import FakeInventory
from gpupool.ports import PodLease

GiB = 2**30


def _agent(leases: int) -> tuple[CollectorRegistry, AgentCollector, AgentReading]:
    inv = FakeInventory.from_spec("8xA100-80GB", node="n1")
    gpus = inv.devices()
    pods = tuple(
        PodLease(
            f"ns/uid-{i}", f"ns/pod-{i}", f"uid-{i}", "n1",
            (Slice(gpus[i % 8].index, gpus[i % 8].uuid, gpus[i % 8].model, 0, GiB, 100),),
        )
        for i in range(leases)
    )  # fmt: skip
    collector = AgentCollector("n1")
    registry = CollectorRegistry()
    registry.register(collector)
    return registry, collector, AgentReading("n1", gpus, inv.telemetry(), pods)


def _controller(leases: int) -> tuple[ControllerMetrics, ControllerReading]:
    tenants = tuple(
        TenantReading(f"t{i}", "gpu-memory", 80 * GiB, 0, 10 * GiB, 0, 0, 10, 2, 30.0, 5.0)
        for i in range(100)
    )
    cards = tuple(
        CardReading(f"n{n}", g, f"GPU-{n}-{g}", "A100-80GB", 80 * GiB, 8 * GiB, 0.1)
        for n in range(leases // 8)
        for g in range(8)
    )
    admissions = tuple(Admission(f"t{i % 100}", False, 12.0) for i in range(leases))
    metrics = ControllerMetrics()
    metrics.observe(ControllerReading(tenants, cards, (("active", leases),), admissions))
    return metrics, ControllerReading(tenants, cards, (("active", leases),), ())


def _time(scrape: object, repeat: int) -> tuple[float, int]:
    assert callable(scrape)
    best = float("inf")
    size = 0
    for _ in range(repeat):
        start = time.process_time()
        body = scrape()
        best = min(best, time.process_time() - start)
        size = len(body)
    return best, size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--leases", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    registry, collector, reading = _agent(args.leases)

    def agent_scrape() -> bytes:
        collector.update(reading)
        return generate_latest(registry)

    metrics, round_reading = _controller(args.leases)

    def controller_scrape() -> bytes:
        metrics.observe(round_reading)
        return generate_latest(metrics.registry)

    agent_s, agent_bytes = _time(agent_scrape, args.repeat)
    controller_s, controller_bytes = _time(controller_scrape, args.repeat)
    print(json.dumps({
        "leases": args.leases,
        "agent": {"cpu_ms_per_scrape": round(agent_s * 1000, 2), "bytes": agent_bytes},
        "controller": {"cpu_ms_per_scrape": round(controller_s * 1000, 2),
                       "bytes": controller_bytes, "cards": len(round_reading.cards),
                       "tenants": len(round_reading.tenants)},
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
