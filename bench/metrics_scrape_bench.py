"""Cost of one /metrics scrape of the agent and of the controller at 1,000 leases, and of the
webhook: CPU time per scrape (the collector building its families and prometheus_client writing
the text), and bytes.

    .venv/bin/python bench/metrics_scrape_bench.py [--leases 1000] [--repeat 50]

Prints JSON. The agent's reading is one node of 8 cards with the leases spread over them (more
than a node holds in practice: 10 per card is the device plugin's default); the controller's is
100 tenants and 125 nodes of 8 cards. The lease listing itself (one API call) is not counted.
`agent_usage_read` is what the agent adds per scrape for memory really used: reading each
lease's limiter accounting file (written here in the limiter's layout, 2 processes each, in a
temporary folder). The webhook's registry holds every resource x operation x result and a dozen
denial reasons.
"""

from __future__ import annotations

import argparse
import json
import struct
import tempfile
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from gpupool.adapters.metrics.agent import AgentCollector, AgentReading
from gpupool.adapters.metrics.controller import (
    Admission,
    CardReading,
    ControllerMetrics,
    ControllerReading,
    TenantReading,
)
from gpupool.adapters.metrics.webhook import WebhookMetrics
from gpupool.cli.agent import leases_usage
from gpupool.domain.allocations import Slice
from gpupool.node.device_plugin.decide import allocation_key
from gpupool.node.limiter_usage import MAGIC, MAX_PROCS, VERSION, usage_file
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
    metrics.admitted(admissions)
    metrics.observe(ControllerReading(tenants, cards, (("active", leases),)))
    return metrics, ControllerReading(tenants, cards, (("active", leases),))


PROCS_OFFSET = 200  # after the header, the limits and a 40-byte mutex (x86-64 glibc)
PROC = struct.Struct("<iIQ16Q")


def _usage_files(folder: Path, pods: tuple[PodLease, ...]) -> tuple[PodLease, ...]:
    """Each lease recorded with a device, and its container's accounting file as the limiter
    writes it (two live processes)."""
    recorded = []
    for i, pod in enumerate(pods):
        lease = PodLease(pod.lease, pod.pod, pod.pod_uid, pod.node, pod.slices,
                         device_ids=(f"{pod.slices[0].uuid}::{i}",))  # fmt: skip
        path = usage_file(folder, allocation_key(lease.device_ids))
        path.parent.mkdir(parents=True)
        size = PROCS_OFFSET + MAX_PROCS * PROC.size
        head = struct.pack("<QIIIIQ", MAGIC, VERSION, size, PROCS_OFFSET, 2, time.time_ns())
        body = bytearray(size)
        body[: len(head)] = head
        for slot in range(2):
            used = [GiB // 4] + [0] * 15
            PROC.pack_into(body, PROCS_OFFSET + slot * PROC.size, 100 + slot, 0, 1, *used)
        path.write_bytes(bytes(body))
        recorded.append(lease)
    return tuple(recorded)


def _webhook() -> WebhookMetrics:
    metrics = WebhookMetrics()
    reasons = ["InvalidRequest", "InvalidQuantity", "RequestExceedsCluster", "UnknownGpuModel",
               "InvalidQuota", "NamespaceUnreadable", "InternalError", "InvalidNode", "Denied",
               "InvalidLeaseTtl", "InvalidGang", "InvalidHamiRequest"]  # fmt: skip
    for resource in ("pods", "gpuquotas"):
        for operation in ("CREATE", "UPDATE", "DELETE"):
            for result in ("allowed", "denied", "error", "malformed"):
                metrics.answered(resource, operation, result, 0.002, None)
        for reason in reasons:
            metrics.answered(resource, "CREATE", "denied", 0.003, reason)
    return metrics


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

    webhook = _webhook()

    def webhook_scrape() -> bytes:
        return generate_latest(webhook.registry)

    with tempfile.TemporaryDirectory() as folder:
        recorded = _usage_files(Path(folder), reading.leases or ())

        def usage_read() -> bytes:
            found = leases_usage(Path(folder), recorded)
            assert len(found) == len(recorded)
            return b"x" * len(found)

        usage_s, _ = _time(usage_read, args.repeat)
    agent_s, agent_bytes = _time(agent_scrape, args.repeat)
    controller_s, controller_bytes = _time(controller_scrape, args.repeat)
    webhook_s, webhook_bytes = _time(webhook_scrape, args.repeat)
    print(json.dumps({
        "leases": args.leases,
        "agent": {"cpu_ms_per_scrape": round(agent_s * 1000, 2), "bytes": agent_bytes},
        "agent_usage_read": {"cpu_ms_per_scrape": round(usage_s * 1000, 2),
                             "files": len(recorded)},
        "webhook": {"cpu_ms_per_scrape": round(webhook_s * 1000, 2), "bytes": webhook_bytes},
        "controller": {"cpu_ms_per_scrape": round(controller_s * 1000, 2),
                       "bytes": controller_bytes, "cards": len(round_reading.cards),
                       "tenants": len(round_reading.tenants)},
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
