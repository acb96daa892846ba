"""The replay engine on small hand-made clusters: each behaviour the three modes must show."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from gpupool.cli.replay import add_replay_parser
from gpupool.domain.devices import uniform_node
from gpupool.domain.errors import InputFileError, InvalidQuota
from gpupool.domain.requests import Request
from gpupool.placement import TargetWorkload
from gpupool.quota.resource import Resource
from gpupool.quota.spec import TenantQuota
from gpupool.simulator.openb import TracePod
from gpupool.simulator.replay import Engine
from gpupool.simulator.replay_experiment import ReplayConfig, run_experiment
from gpupool.simulator.replay_jobs import make_jobs, peak_offered, thin_nodes
from gpupool.simulator.tenancy import Tenancy, TenantRule, default_tenancy
from gpupool.simulator.tenants_yaml import load_tenancy

NODES = [
    uniform_node(f"n{i}", cpu_milli=64000, memory_mib=262144, gpu_count=2, model="T4")
    for i in range(2)
]


def pod(name: str, milli: int, at: float, run: float, qos: str = "LS", gpus: int = 1) -> TracePod:
    return TracePod(
        request=Request(name=name, cpu_milli=1000, gpu_count=gpus, gpu_milli=milli),
        creation_time=at,
        deletion_time=at + run,
        scheduled_time=at,
        qos=qos,
    )


def tenancy(borrow: bool = True, nominal_a: int = 2000, nominal_b: int = 2000) -> Tenancy:
    rules = (
        TenantRule(
            TenantQuota(name="a", nominal=nominal_a, resource=Resource.GPU, cohort="c"), ("LS",)
        ),
        TenantRule(
            TenantQuota(name="b", nominal=nominal_b, resource=Resource.GPU, cohort="c"), None
        ),
    )
    t = Tenancy(rules=rules)
    return t if borrow else t.without_borrowing()


def run(mode: str, pods: list[TracePod], ten: Tenancy) -> dict[str, object]:
    jobs, _ = make_jobs(pods, ten, 1.0, whole_card=mode == "whole-card")
    wl = TargetWorkload.from_requests([p.request for p in pods])
    return Engine.create(mode, NODES, jobs, ten, "best-fit", wl).run().to_json()


def test_whole_card_queues_what_pooling_packs() -> None:
    # eight half-GPU pods on four cards: pooled runs them all at once, whole-card in two waves
    pods = [pod(f"p{i}", 500, 0.0, 100.0, qos="LS" if i % 2 else "BE") for i in range(8)]
    pods.append(pod("tail", 100, 150.0, 1.0))  # keeps the arrival window open to t=150
    whole = run("whole-card", pods, tenancy())
    pooled = run("pooled", pods, tenancy())
    assert whole["queue_delay_s_p95"] == pytest.approx(100.0)
    assert pooled["queue_delay_s_p95"] == 0.0
    assert pooled["gpu_allocation_pct_mean"] > whole["gpu_allocation_pct_mean"]
    assert whole["gpu_held_pct_mean"] > whole["gpu_allocation_pct_mean"]


def test_borrowing_uses_idle_quota_and_reclaim_gives_it_back() -> None:
    # tenant a (LS) wants the whole cluster first; b arrives later and reclaims its quota
    pods = [pod(f"a{i}", 1000, 0.0, 1000.0) for i in range(4)]
    pods += [pod(f"b{i}", 1000, 10.0, 50.0, qos="BE") for i in range(2)]
    no_borrow = run("pooled", pods, tenancy())
    borrow = run("pooled-borrowing", pods, tenancy())
    assert no_borrow["reclaims"] == 0
    assert no_borrow["borrowed_gpu_hours"] == 0.0
    assert borrow["reclaims"] == 2  # both borrowed cards come back to b after the grace period
    assert borrow["borrowed_gpu_hours"] > 0
    tenants = borrow["tenants"]
    assert isinstance(tenants, dict)
    # each b pod reclaims one card: the first waits one grace period (30 s), the second, which
    # asks only once the first is admitted, a second one (60 s): median 45 s
    assert tenants["b"]["queue_delay_s_p50"] == pytest.approx(45.0)
    assert tenants["b"]["admitted"] == 2
    # the evicted pods restart and are metered again, but count once as admitted
    assert tenants["a"]["admitted"] == 4


def test_pods_that_never_fit_are_rejected_not_stuck() -> None:
    pods = [pod("huge", 1000, 0.0, 10.0, gpus=8), pod("ok", 500, 0.0, 10.0)]
    out = run("pooled-borrowing", pods, tenancy())
    assert out["rejected"] == 1
    assert out["admitted"] == 1


def test_sum_of_leases_equals_allocation_at_the_end() -> None:
    pods = [pod(f"p{i}", 250 * (1 + i % 4), float(i), 30.0 + i) for i in range(20)]
    ten = tenancy()
    jobs, _ = make_jobs(pods, ten, 1.0, whole_card=False)
    engine = Engine.create(
        "pooled-borrowing",
        NODES,
        jobs,
        ten,
        "best-fit",
        TargetWorkload.from_requests([p.request for p in pods]),
    )
    engine.run()
    assert len(engine.ledger) == 0
    assert engine.snap.allocated_gpu_milli() == 0
    assert engine.requested_milli == 0


def test_default_tenancy_splits_capacity_by_request() -> None:
    pods = [
        pod("l", 1000, 0, 1, "LS"),
        pod("b", 1000, 0, 1, "BE"),
        pod("x", 1000, 0, 1, "Guaranteed"),
    ]
    ten = default_tenancy([*pods, pod("l2", 1000, 0, 1, "LS")], 4000)
    nominal = {r.quota.name: r.quota.nominal for r in ten.rules}
    assert nominal == {"ls": 2000, "be": 1000, "other": 1000}
    assert ten.assign(pods[2]) is not None and ten.assign(pods[2]).quota.name == "other"  # type: ignore[union-attr]


def test_load_helpers() -> None:
    pods = [pod("a", 500, 0, 10), pod("b", 500, 5, 10), pod("c", 1000, 20, 10)]
    assert peak_offered(pods, 1.0) == 1000
    assert len(thin_nodes(NODES * 1, 0.5)) == 1
    with pytest.raises(ValueError, match="fraction"):
        thin_nodes(NODES, 0.0)


def test_tenants_yaml(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(
        "fifo: strict\ntenants:\n"
        "  - {name: a, qos: [LS], nominal: 50%, guaranteed: 1, cohort: c, borrow_limit: 500m}\n"
        "  - {name: b, nominal: 2000m, cohort: c, budget: {limit: 5, window_s: 3600}}\n"
    )
    ten = load_tenancy(path, {Resource.GPU: 4000})
    a, b = (r.quota for r in ten.rules)
    assert (a.nominal, a.guaranteed, a.borrow_limit) == (2000, 1000, 500)
    assert b.budget is not None and b.budget.limit == 5
    path.write_text("tenants:\n  - {name: a, nominal: 1, guaranteed: 2}\n")
    with pytest.raises(InputFileError, match="guaranteed quota"):
        load_tenancy(path, {Resource.GPU: 4000})
    path.write_text("tenants:\n  - {name: a, nominal: 1, colour: red}\n")
    with pytest.raises(InputFileError, match="unknown key"):
        load_tenancy(path, {Resource.GPU: 4000})
    with pytest.raises(InvalidQuota, match="only one tenant"):
        Tenancy(rules=(TenantRule(a, None), TenantRule(b, None)))


def test_cli_writes_json_with_the_issue_keys(tmp_path: Path) -> None:
    nodes_csv = tmp_path / "nodes.csv"
    nodes_csv.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,T4\nn1,64000,262144,2,T4\n"
    )
    pods_csv = tmp_path / "pods.csv"
    rows = [
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
    ]
    for i in range(10):
        qos = "LS" if i % 2 else "BE"
        t = i * 10
        rows.append(f"p{i},1000,1024,1,{300 + 50 * i},,{qos},Running,{t},{t + 500},{t}")
    pods_csv.write_text("\n".join(rows) + "\n")
    parser = argparse.ArgumentParser()
    add_replay_parser(parser.add_subparsers())
    out = tmp_path / "out.json"
    args = parser.parse_args(
        [
            "replay",
            "--nodes",
            str(nodes_csv),
            "--pods",
            str(pods_csv),
            "--json",
            str(out),
            "--time-scale",
            "1",
            "--cluster-fraction",
            "1",
            "--policy",
            "best-fit",
        ]
    )
    assert args.func(args) == 0
    data = json.loads(out.read_text())
    assert set(data["runs"]) == {"whole-card", "pooled", "pooled-borrowing"}
    for run_ in data["runs"].values():
        for key in (
            "gpu_allocation_pct_mean",
            "queue_delay_s_p50",
            "queue_delay_s_p95",
            "queue_delay_s_p99",
            "reclaims",
            "borrowed_gib_hours",
            "tenants",
        ):
            assert key in run_
        for t in run_["tenants"].values():
            assert {"gib_hours", "admitted", "rejected", "queue_delay_s_p50"} <= set(t)
    bad = parser.parse_args(
        ["replay", "--nodes", str(tmp_path / "missing.csv"), "--pods", str(pods_csv)]
    )
    assert bad.func(bad) == 2


def test_config_defaults_are_documented_values() -> None:
    config = ReplayConfig()
    assert config.time_scale == 10_000.0 and config.target_load == 1.25
    result = run_experiment(
        NODES, [pod("a", 500, 0, 10)], None, ReplayConfig(cluster_fraction=1.0, policy="best-fit")
    )
    assert set(result.runs) == {"whole-card", "pooled", "pooled-borrowing"}


def test_the_simulator_puts_no_more_pods_on_a_card_than_its_share_count() -> None:
    # 45 tiny pods on 4 cards of 10 shares each: 40 run at once, 5 wait for the first to end,
    # although memory and compute would take them all
    pods = [pod(f"p{i}", 10, 0.0, 100.0) for i in range(45)]
    pods.append(pod("tail", 10, 150.0, 1.0))
    out = run("pooled", pods, tenancy())
    assert out["admitted"] == 46
    assert out["queue_delay_s_p95"] == pytest.approx(100.0)
