"""`gpupool usage` on a replayed workload: the replay engine's leases, written as the GpuLeases
the cluster would hold, give per tenant the GiB-hours the leases sum to (and the replay's own
meter counted), to the rounding of their times; and the controller's
`gpupool_controller_tenant_gib_hours` over the same GpuLeases says the same."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from fake_cluster import FakeCluster, quota_json
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpupool.adapters.metrics.controller import ControllerMetrics
from gpupool.cli.main import main
from gpupool.controllers.admission.reconcile import AdmissionReconciler
from gpupool.controllers.observe import MetricsObserver
from gpupool.domain.devices import uniform_node
from gpupool.domain.requests import Request
from gpupool.placement import TargetWorkload
from gpupool.ports import Json
from gpupool.quota.lease import Lease
from gpupool.quota.metering import Meter
from gpupool.quota.resource import Resource
from gpupool.quota.spec import TenantQuota
from gpupool.rfc3339 import format_time
from gpupool.simulator.openb import TracePod
from gpupool.simulator.replay import Engine
from gpupool.simulator.replay_jobs import make_jobs
from gpupool.simulator.tenancy import Tenancy, TenantRule

T0 = 1_767_225_600.0  # replay time 0 is this wall-clock time
NODES = [
    uniform_node(f"n{i}", cpu_milli=64000, memory_mib=262144, gpu_count=2, model="T4")
    for i in range(2)
]


class RecordingMeter(Meter):
    """The replay's meter, keeping each lease it closes (the leases a cluster would hold)."""

    closed: list[Lease]

    def close(self, lease: Lease) -> None:
        self.closed.append(lease)
        super().close(lease)


def _pods() -> list[TracePod]:
    shapes = [("ls-a", 500, 1, "LS"), ("ls-b", 250, 1, "LS"), ("be-a", 1000, 1, "BE"),
              ("be-b", 1000, 2, "BE"), ("ls-c", 300, 1, "LS"), ("be-c", 100, 1, "BE")]  # fmt: skip
    pods = []
    for i in range(18):
        name, milli, gpus, qos = shapes[i % len(shapes)]
        at, run = 37.5 * i, 600.0 + 113.0 * (i % 5)
        request = Request(name=f"{name}-{i}", cpu_milli=1000, gpu_count=gpus, gpu_milli=milli)
        pods.append(TracePod(request, at, at + run, at, qos))
    return pods


def _replay() -> tuple[list[Lease], dict[str, float]]:
    rules = (
        TenantRule(TenantQuota(name="alpha", nominal=2000, resource=Resource.GPU, cohort="c"),
                   ("LS",)),
        TenantRule(TenantQuota(name="beta", nominal=2000, resource=Resource.GPU, cohort="c"),
                   None),
    )  # fmt: skip
    tenancy = Tenancy(rules=rules)
    pods = _pods()
    jobs, _ = make_jobs(pods, tenancy, 1.0, whole_card=False)
    workload = TargetWorkload.from_requests([p.request for p in pods])
    engine = Engine.create("pooled-borrowing", NODES, jobs, tenancy, "best-fit", workload)
    meter = RecordingMeter(engine.meter.book)
    meter.closed = []
    engine.meter = meter
    stats = engine.run()
    return meter.closed, {name: t.gib_hours for name, t in stats.tenants.items()}


def gpulease_json(lease: Lease) -> Json:
    """The GpuLease the cluster would hold for a replayed lease that ended: in the tenant's
    namespace, for a pod named after the job, on one card, its times as the controller stamps
    them (RFC 3339, microseconds)."""
    job = lease.id.split("@")[0]
    assert lease.ended_at is not None
    return {
        "apiVersion": "gpupool.io/v1alpha1", "kind": "GpuLease",
        "metadata": {"name": f"uid-{lease.id.replace('@', '-')}", "namespace": lease.tenant},
        "spec": {
            "tenant": lease.tenant,
            "podRef": {"namespace": lease.tenant, "name": job, "uid": f"uid-{lease.id}"},
            "node": "n0",
            "devices": [{"index": 0, "uuid": "GPU-n0-0", "model": "T4", "offsetBytes": 0,
                         "sizeBytes": lease.gpu_memory_bytes}],
            "amount": lease.amount,
        },
        "status": {"phase": "Released", "start": format_time(T0 + lease.reserved_at),
                   "end": format_time(T0 + lease.ended_at)},
    }  # fmt: skip


def test_usage_of_a_replay_is_the_sum_of_its_leases_and_the_controllers_metric(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    closed, replay_gib = _replay()
    assert len(closed) >= 12 and {le.tenant for le in closed} == {"alpha", "beta"}
    sums: dict[str, float] = {}
    for lease in closed:
        assert lease.ended_at is not None
        sums[lease.tenant] = sums.get(lease.tenant, 0.0) + lease.gib_hours(lease.ended_at)
    assert sums == pytest.approx(replay_gib)  # the replay's own meter counted the same
    objects = [gpulease_json(le) for le in closed]
    exported = tmp_path / "leases.jsonl"
    exported.write_text("".join(json.dumps(o) + "\n" for o in objects))

    assert main(["usage", "--from-file", str(exported), "-o", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    billed = {r["tenant"]: r["gibHours"] for r in rows}
    # to the rounding: times in microseconds, six decimals printed
    assert billed == pytest.approx(sums, abs=1e-5)
    assert sum(r["leases"] for r in rows) == len(closed)

    assert main(["usage", "--from-file", str(exported), "--by", "pod", "-o", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "tenant,namespace,pod,gib_hours,gpu_hours,leases"
    per_pod = sum(float(line.split(",")[3]) for line in lines[1:])
    assert per_pod == pytest.approx(sum(sums.values()), abs=1e-4)

    # the controller, over the same GpuLeases, after they all ended
    cluster = FakeCluster(
        quotas=[quota_json("alpha", 100), quota_json("beta", 100)], leases=objects
    )
    end = T0 + max(le.ended_at or 0.0 for le in closed) + 60
    metrics = ControllerMetrics()

    async def round_() -> None:
        admission = await AdmissionReconciler(cluster, lambda: end).reconcile()
        await MetricsObserver(cluster, metrics).observe(admission)

    asyncio.run(round_())
    shown = {
        s.labels["tenant"]: s.value
        for family in text_string_to_metric_families(generate_latest(metrics.registry).decode())
        for s in family.samples
        if s.name == "gpupool_controller_tenant_gib_hours"
    }
    assert shown.pop("default") == 0  # the implicit tenant, shown with nothing
    assert shown == pytest.approx(billed, abs=1e-5)
