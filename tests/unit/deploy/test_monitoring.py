"""deploy/prometheus and deploy/grafana: the scrape config and alert rules pass promtool (and the
rules' unit tests, alerts_test.yaml); both boards are structurally sound, every panel's PromQL
parses (promtool, with the template variables expanded) and names only series gpupool exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from gpupool.adapters.extender_http.server import Metrics as ExtenderMetrics
from gpupool.adapters.metrics.agent import AgentCollector, AgentReading
from gpupool.adapters.metrics.controller import (
    Admission,
    BudgetReading,
    CardReading,
    ControllerMetrics,
    ControllerReading,
    TenantReading,
)
from gpupool.adapters.metrics.webhook import WebhookMetrics
from gpupool.domain.allocations import Slice
from gpupool.domain.devices import Gpu
from gpupool.ports import CardTelemetry, ContainerUsage, PodLease

REPO = Path(__file__).resolve().parents[3]
PROMETHEUS = REPO / "deploy" / "prometheus"
BOARDS = [REPO / "deploy" / "grafana" / f"{n}.json" for n in ("operations", "tenants")]
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (make prometheus installs Debian's package)"
)
# Series Prometheus itself makes for every target.
PROMETHEUS_OWN = {"up"}


def exported_names() -> set[str]:
    """Every sample name the agent and the controller export, from one reading of each."""
    agent = AgentCollector("n1")
    piece = Slice(0, "GPU-a", "A100-80GB", 0, 1, 0)
    agent.update(
        AgentReading(
            "n1",
            (Gpu(index=0, model="A100-80GB", uuid="GPU-a"),),
            (CardTelemetry("GPU-a", 1.0, 1, 2, 30.0, 50.0, 0, 0),),
            (PodLease("ns/l", "ns/p", "u", "n1", (piece,)),),
            {"ns/l": ContainerUsage((1,), 1.0)},
        )
    )
    registry = CollectorRegistry()
    registry.register(agent)
    controller = ControllerMetrics()
    controller.observe(
        ControllerReading(
            (TenantReading("a", "gpu-memory", 1, 0, 1, 0, 0, 1, 0, 0.0, 0.0),),
            (CardReading("n1", 0, "GPU-a", "A100-80GB", 2, 1, 0.5),),
            (("active", 1),),
            budgets=(BudgetReading("a", "GiB-hours", 10.0, 1.0, 9.0),),
            nodes_by_health=(("Healthy", 1),),
            charge_mismatches=(("a", 0),),
        )
    )
    controller.admitted((Admission("a", False, 1.0),))
    controller.evicted("NodeLost")
    controller.reconcile_took("leases", 0.1)  # the round-time histogram's series
    webhook = WebhookMetrics()
    webhook.answered("pods", "CREATE", "denied", 0.01, "InvalidRequest")
    extender = ExtenderMetrics()
    extender.requests.labels("bind", "error").inc()
    extender.binds.labels("error").inc()
    extender.latency.labels("filter").observe(0.001)
    names = set()
    for reg in (registry, controller.registry, webhook.registry, extender.registry):
        for family in reg.collect():
            names |= {s.name for s in family.samples}
    return names


def _board_exprs(board: dict[str, object]) -> list[str]:
    exprs = []
    for panel in board["panels"]:  # type: ignore[attr-defined]
        for target in panel["targets"]:
            exprs.append(target["expr"])
    return exprs


def expand(expr: str) -> str:
    """Template variables as Grafana expands 'All' (regex .*)."""
    return re.sub(r"\$\{?(\w+)\}?", ".*", expr)


@needs_promtool
def test_the_scrape_config_and_the_rules_pass_promtool() -> None:
    for args in (["check", "config", "prometheus.yaml"], ["check", "rules", "alerts.yaml"]):
        done = subprocess.run([PROMTOOL, *args], cwd=PROMETHEUS, capture_output=True, text=True)  # type: ignore[list-item]
        assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
def test_the_kubernetes_scrape_config_passes_promtool_but_for_its_discovery(
    tmp_path: Path,
) -> None:
    # Debian's prometheus is built without Kubernetes service discovery, so promtool here
    # refuses kubernetes_sd_configs as an unknown field: each job's discovery is swapped for a
    # file one and the rest (jobs, relabelling, rules) is checked as written.
    config = yaml.safe_load((PROMETHEUS / "kubernetes.yaml").read_text())
    jobs = {job["job_name"] for job in config["scrape_configs"]}
    assert jobs == {"gpupool-agent", "gpupool-controller", "gpupool-webhook", "gpupool-extender"}
    for job in config["scrape_configs"]:
        [sd] = job.pop("kubernetes_sd_configs")
        assert sd["role"] == "endpoints" and sd["namespaces"]["names"] == ["gpupool-system"]
        job["file_sd_configs"] = [{"files": [f"targets/{job['job_name']}.yaml"]}]
        keep = [r for r in job["relabel_configs"] if r.get("action") == "keep"]
        assert keep and keep[0]["source_labels"][0] == "__meta_kubernetes_service_name"
    config["rule_files"] = [str(PROMETHEUS / "alerts.yaml")]
    (tmp_path / "kubernetes.yaml").write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [PROMTOOL, "check", "config", str(tmp_path / "kubernetes.yaml")],  # type: ignore[list-item]
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_scrape_configs_name_the_jobs_the_rules_name() -> None:
    rules = (PROMETHEUS / "alerts.yaml").read_text()
    named = set(re.findall(r'job="([\w-]+)"', rules))
    for file in ("prometheus.yaml", "kubernetes.yaml"):
        config = yaml.safe_load((PROMETHEUS / file).read_text())
        jobs = {job["job_name"] for job in config["scrape_configs"]}
        assert named <= jobs, f"{file}: no job {named - jobs}"


@needs_promtool
def test_every_alert_fires_for_its_series_and_not_for_the_others() -> None:
    done = subprocess.run(
        [PROMTOOL, "test", "rules", "alerts_test.yaml"],  # type: ignore[list-item]
        cwd=PROMETHEUS, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    tested = set(re.findall(r"alertname: (\w+)", (PROMETHEUS / "alerts_test.yaml").read_text()))
    rules = yaml.safe_load((PROMETHEUS / "alerts.yaml").read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    assert alerts == tested, f"alerts without a unit test: {alerts - tested}"


def test_the_rules_name_only_series_gpupool_exports() -> None:
    rules = yaml.safe_load((PROMETHEUS / "alerts.yaml").read_text())
    used = {n for g in rules["groups"] for r in g["rules"] for n in _names(r["expr"])}
    assert used - exported_names() - PROMETHEUS_OWN == set()


def _names(expr: str) -> set[str]:
    return set(re.findall(r"\b(gpupool_\w+|up)\b(?=\s*[{\[)\s]|$)", expr))


@pytest.mark.parametrize("path", BOARDS, ids=lambda p: p.stem)
def test_a_board_is_structurally_sound(path: Path) -> None:
    board = json.loads(path.read_text())
    assert board["uid"] and board["title"] and board["schemaVersion"] >= 36
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)) and ids
    for panel in board["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["fieldConfig"]["defaults"]["unit"], f"{panel['title']}: no unit"
        assert set(panel["gridPos"]) == {"x", "y", "w", "h"}
        assert panel["targets"], f"{panel['title']}: no query"
        for target in panel["targets"]:
            used = set(re.findall(r"\$\{?(\w+)\}?", target["expr"]))
            assert used <= set(variables), f"{panel['title']}: unknown variable {used}"
    if path.stem == "tenants":
        assert "tenant" in variables


@pytest.mark.parametrize("path", BOARDS, ids=lambda p: p.stem)
def test_every_panel_names_only_series_gpupool_exports(path: Path) -> None:
    exported = exported_names() | PROMETHEUS_OWN
    for expr in _board_exprs(json.loads(path.read_text())):
        names = _names(expand(expr))
        assert names, f"no metric in {expr!r}"
        assert names <= exported, f"{expr!r} names {names - exported}"


@needs_promtool
@pytest.mark.parametrize("path", BOARDS, ids=lambda p: p.stem)
def test_every_panel_query_parses(path: Path, tmp_path: Path) -> None:
    exprs = [expand(e) for e in _board_exprs(json.loads(path.read_text()))]
    rules = {"groups": [{"name": "panels", "rules": [
        {"record": f"panel:{i}", "expr": e} for i, e in enumerate(exprs)
    ]}]}  # fmt: skip
    file = tmp_path / "panels.yaml"
    file.write_text(yaml.safe_dump(rules))
    done = subprocess.run([PROMTOOL, "check", "rules", str(file)], capture_output=True, text=True)  # type: ignore[list-item]
    assert done.returncode == 0, done.stdout + done.stderr
