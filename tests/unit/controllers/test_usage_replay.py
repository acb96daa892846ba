"""`gpupool usage` on a replayed workload: the leases `gpupool simulate replay --export-leases`
writes (the GpuLeases the cluster would hold) give per tenant the GiB-hours the leases sum to,
which the replay's own meter counted, to the rounding of their times; and the controller's
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
from gpupool.cli.replay import export_leases
from gpupool.controllers.admission.reconcile import AdmissionReconciler
from gpupool.controllers.observe import MetricsObserver
from gpupool.domain.devices import uniform_node
from gpupool.domain.requests import Request
from gpupool.domain.units import GiB
from gpupool.ports import Json
from gpupool.quota.resource import Resource
from gpupool.quota.spec import TenantQuota
from gpupool.rfc3339 import parse_time
from gpupool.simulator.openb import TracePod
from gpupool.simulator.replay_experiment import ReplayConfig, run_experiment
from gpupool.simulator.tenancy import Tenancy, TenantRule

MODE = "pooled-borrowing"
NODES = [
    uniform_node(f"n{i}", cpu_milli=64000, memory_mib=262144, gpu_count=2, model="T4")
    for i in range(2)
]


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


TENANCY = Tenancy(
    rules=(
        TenantRule(TenantQuota(name="alpha", nominal=2000, resource=Resource.GPU, cohort="c"),
                   ("LS",)),
        TenantRule(TenantQuota(name="beta", nominal=2000, resource=Resource.GPU, cohort="c"),
                   None),
    )
)  # fmt: skip
CONFIG = ReplayConfig(policy="best-fit", time_scale=1.0, cluster_fraction=1.0, modes=(MODE,))


def _replay(tmp_path: Path) -> tuple[Path, dict[str, float], list[Json]]:
    """`gpupool simulate replay --export-leases`'s export of one mode, and that mode's own
    GiB-hours per tenant (the replay's meter)."""
    pods = _pods()
    stats = run_experiment(NODES, pods, TENANCY, CONFIG).runs[MODE]
    exported = tmp_path / "leases.jsonl"
    export_leases(NODES, pods, TENANCY, CONFIG, MODE, str(exported))
    objects = [json.loads(line) for line in exported.read_text().splitlines()]
    return exported, {name: t.gib_hours for name, t in stats.tenants.items()}, objects


def test_usage_of_a_replay_is_the_sum_of_its_leases_and_the_controllers_metric(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exported, replay_gib, objects = _replay(tmp_path)
    assert len(objects) >= 12 and {o["spec"]["tenant"] for o in objects} == {"alpha", "beta"}
    sums: dict[str, float] = {}
    for obj in objects:  # each lease's GiB-hours from what it says it held, and when
        held = sum(d["sizeBytes"] for d in obj["spec"]["devices"]) / GiB
        hours = (parse_time(obj["status"]["end"]) - parse_time(obj["status"]["start"])) / 3600
        sums[obj["spec"]["tenant"]] = sums.get(obj["spec"]["tenant"], 0.0) + held * hours
    assert sums == pytest.approx(replay_gib, abs=1e-5)  # the replay's own meter, to the rounding

    assert main(["usage", "--from-file", str(exported), "-o", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    billed = {r["tenant"]: r["gibHours"] for r in rows}
    # to the rounding: times in microseconds, six decimals printed
    assert billed == pytest.approx(sums, abs=1e-5)
    assert sum(r["leases"] for r in rows) == len(objects)

    assert main(["usage", "--from-file", str(exported), "--by", "pod", "-o", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "tenant,namespace,pod,gib_hours,gpu_hours,leases"
    per_pod = sum(float(line.split(",")[3]) for line in lines[1:])
    assert per_pod == pytest.approx(sum(sums.values()), abs=1e-4)

    # the controller, over the same GpuLeases, after they all ended
    cluster = FakeCluster(
        quotas=[quota_json("alpha", 100), quota_json("beta", 100)], leases=objects
    )
    end = max(parse_time(o["status"]["end"]) or 0.0 for o in objects) + 60
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
