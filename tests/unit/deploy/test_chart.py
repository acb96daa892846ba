"""The Helm chart deploy/helm/gpupool: `helm lint`, `helm template` with the defaults and with
other values, and deploy/'s plain manifests being exactly its rendering.

tests/unit/deploy/test_deploy_install.py checks the plain manifests (the chart rendered with
tools/helm/plain-values.yaml) against gpupool's code; the tests here check what only the other
values render: the certificate the chart makes itself, and values that must move several
objects together (namespace, ports, skipped namespaces, extra flags). That the API server takes
the chart is tests/e2e/test_install_e2e.py.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import io
import shutil
import subprocess
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from cryptography import x509

from gpupool.adapters.webhook import policy
from gpupool.adapters.webhook import register as registration
from gpupool.adapters.webhook.certs import ensure_serving_cert
from gpupool.cli import webhook as webhook_cli
from gpupool.cli.main import build_parser
from gpupool.devcluster.scheduler_config import ExtenderConfig

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "deploy" / "helm" / "gpupool"
DEPLOY = REPO / "deploy"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
# deploy/ files that are not the chart's: the namespace (helm's --create-namespace makes it) and
# the per-tenant template (NAMESPACE, TENANT to fill in).
NOT_RENDERED = {"rbac/namespace.yaml", "rbac/tenant.yaml"}


def _helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120)


def _template(helm: Path, *args: str, namespace: str = "gpupool-system") -> list[dict[str, Any]]:
    done = _helm(helm, "template", "gpupool", str(CHART), "--namespace", namespace, *args)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def _container(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    container: dict[str, Any] = _one(docs, kind, name)["spec"]["template"]["spec"]["containers"][0]
    return container


def _parse(argv: list[str]) -> argparse.Namespace:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return build_parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"`gpupool {' '.join(argv)}` does not parse: {err.getvalue().strip()}")


# ---- lint, versions, the plain manifests -------------------------------------------------------


@pytest.mark.parametrize("values", [[], ["-f", "tools/helm/plain-values.yaml"]])
def test_helm_lint_passes_strictly(helm: Path, values: list[str]) -> None:
    done = _helm(
        helm,
        "lint",
        "--strict",
        str(CHART),
        *[str(REPO / v) if v.endswith(".yaml") else v for v in values],
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("webhook.certificate.source=vault",
         "at '/webhook/certificate/source': value must be one of 'helm', 'cert-manager'"),
        ("extender.replica=3", "at '/extender': additional properties 'replica' not allowed"),
        ("agent.resources.limitz.memory=1Gi",
         "at '/agent/resources': additional properties 'limitz' not allowed"),
        ("agent.extraArgs={fake-gpus=1xT4}", "at '/agent/extraArgs/0'"),
        ("extender.tls.source=vault",
         "at '/extender/tls/source': value must be one of 'helm', 'cert-manager'"),
        ("extender.tls.enabled=yes", "at '/extender/tls/enabled': got string, want boolean"),
        ("scheduler.tlsDir=relative/dir", "at '/scheduler/tlsDir'"),
    ],
)  # fmt: skip
def test_a_wrong_value_fails_saying_where(helm: Path, setting: str, message: str) -> None:
    # values.schema.json: a misspelt key would otherwise be ignored without a word.
    done = _helm(helm, "template", "gpupool", str(CHART), "--set", setting)
    assert done.returncode != 0
    assert message in done.stderr, done.stderr


def test_the_chart_the_image_and_the_package_have_one_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == VERSION
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["repository"] == "gpupool" and values["image"]["tag"] == ""


@pytest.fixture(scope="module")
def plain(helm: Path, render: ModuleType) -> dict[Path, str]:
    """deploy/'s plain manifests as the chart renders them: path -> text."""
    files: dict[Path, str] = render.plain_files(render.template(helm, "-f", str(render.VALUES)))
    return files


def test_the_plain_manifests_are_exactly_what_the_chart_renders(
    plain: dict[Path, str], render: ModuleType
) -> None:
    stale = render.stale(plain)
    assert not stale, f"{stale}: edit the chart, then run tools/helm/render_manifests.py"
    # ... and every plain manifest is one the chart renders (none kept by hand beside it).
    files = {
        str(p.relative_to(DEPLOY))
        for folder in ("crds", "rbac", "policies", "install", "scheduler")
        for p in (DEPLOY / folder).glob("*.yaml")
    }
    assert files - NOT_RENDERED == {str(p.relative_to("deploy")) for p in plain}


def test_the_check_names_a_hand_edited_manifest(
    plain: dict[Path, str], render: ModuleType, tmp_path: Path
) -> None:
    # The comparison above can fail: one changed line in one file, and that file is named.
    shutil.copytree(DEPLOY, tmp_path / "deploy")
    agent = tmp_path / "deploy" / "install" / "agent.yaml"
    agent.write_text(agent.read_text().replace("--preload=env", "--preload=file"))
    assert render.stale(plain, tmp_path) == [Path("deploy/install/agent.yaml")]


# ---- the certificate the chart makes (the default) -------------------------------------------


def test_the_charts_certificate_is_one_the_webhook_serves_as_is_and_the_apiserver_trusts(
    helm: Path, tmp_path: Path
) -> None:
    docs = _template(helm, namespace="gpu")
    secret = _one(docs, "Secret", "gpupool-webhook-tls")
    files = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    assert set(files) == {"ca.crt", "tls.crt", "tls.key"}
    ca = x509.load_pem_x509_certificate(files["ca.crt"])
    cert = x509.load_pem_x509_certificate(files["tls.crt"])
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "gpupool-webhook.gpu.svc" in names.get_values_for_type(x509.DNSName)
    assert cert.not_valid_after_utc > dt.datetime.now(dt.UTC) + dt.timedelta(days=365)
    # The webhook, started with the chart's flags on the mounted secret, keeps its files.
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    args = _parse(_container(docs, "Deployment", "gpupool-webhook")["args"])
    ensure_serving_cert(tmp_path, webhook_cli._config(args).cert_hosts)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == files
    # Every webhook trusts that CA; nothing waits for cert-manager.
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        config = _one(docs, kind, "gpupool")
        assert "annotations" not in config["metadata"]
        for hook in config["webhooks"]:
            assert base64.b64decode(hook["clientConfig"]["caBundle"]) == files["ca.crt"]
    assert not [d for d in docs if d["apiVersion"].startswith("cert-manager.io/")]


# ---- values that move several objects together ---------------------------------------------


def test_the_webhook_configurations_follow_the_namespace_and_the_skipped_namespaces(
    helm: Path,
) -> None:
    docs = _template(
        helm, "--set", "webhook.skipNamespaces={cert-manager,ingress}", namespace="gpu"
    )
    container = _container(docs, "Deployment", "gpupool-webhook")
    service = _one(docs, "Service", "gpupool-webhook")
    [port] = service["spec"]["ports"]
    target = f"gpu/{service['metadata']['name']}/{port['port']}"
    config = webhook_cli._config(_parse([*container["args"], "--register-service", target]))
    assert config.skip_namespaces == ("kube-system", "gpu", "cert-manager", "ingress")
    built = registration.configurations(
        registration.Registration(
            target=registration.Target(config.register_url, config.register_service),
            ca_bundle=b"",
            name=config.name,
            skip_namespaces=config.skip_namespaces,
        )
    )
    for expected in built:
        rendered = _one(docs, expected["kind"], expected["metadata"]["name"])
        for hook in rendered["webhooks"]:
            hook["clientConfig"].pop("caBundle")
        for hook in expected["webhooks"]:
            hook["clientConfig"].pop("caBundle")
        assert rendered == expected


def test_the_pod_integrity_policy_lets_through_the_release_namespaces_writers(helm: Path) -> None:
    docs = _template(helm, namespace="gpu")
    rendered = [_one(docs, d["kind"], d["metadata"]["name"]) for d in policy.objects()]
    [not_gpupool, *_] = rendered[0]["spec"]["matchConditions"]
    for user in policy.writer_users("gpu"):
        assert f"'{user}'" in not_gpupool["expression"]
    expected = policy.objects()
    condition = expected[0]["spec"]["matchConditions"][0]
    condition["expression"] = condition["expression"].replace(f":{policy.NAMESPACE}:", ":gpu:")
    assert rendered == expected


def test_the_scheduler_configuration_follows_the_extenders_service(helm: Path) -> None:
    docs = _template(
        helm, "--set", "extender.port=9000", "--set", "extender.servicePort=80", namespace="gpu"
    )
    configmap = _one(docs, "ConfigMap", "gpupool-scheduler-config")
    config = yaml.safe_load(configmap["data"]["kube-scheduler-config.yaml"])
    tls = Path("/etc/kubernetes/gpupool-extender")  # scheduler.tlsDir
    assert (
        config["extenders"]
        == ExtenderConfig(
            url_prefix="https://gpupool-extender.gpu.svc:80/gpupool",
            ca_file=tls / "ca.crt",
            cert_file=tls / "tls.crt",
            key_file=tls / "tls.key",
        ).entries()
    )
    assert config["percentageOfNodesToScore"] == 100
    container = _container(docs, "Deployment", "gpupool-extender")
    args = _parse(container["args"])
    assert args.port == 9000 and args.advertise_url == "https://$(POD_IP):9000"
    [port] = _one(docs, "Service", "gpupool-extender")["spec"]["ports"]
    assert port["port"] == 80 and port["targetPort"] == "https"
    assert {"name": "https", "containerPort": 9000, "protocol": "TCP"} in container["ports"]
    assert container["readinessProbe"]["httpGet"]["port"] == 9000


def test_an_explicit_extender_url_is_what_kube_scheduler_calls(helm: Path) -> None:
    url = "http://10.0.0.7:8888/gpupool"
    docs = _template(helm, "--set", f"scheduler.extenderURL={url}")
    configmap = _one(docs, "ConfigMap", "gpupool-scheduler-config")
    entries = yaml.safe_load(configmap["data"]["kube-scheduler-config.yaml"])["extenders"]
    assert [e["urlPrefix"] for e in entries] == [url, url]


def test_extra_flags_and_host_network_reach_the_pods(helm: Path) -> None:
    docs = _template(
        helm,
        "--set", "agent.extraArgs={--fake-gpus=2xA100-80GB,--vgpu-per-card=4}",
        "--set", "agent.nodeSelector.gpupool\\.io/test=yes",
        "--set", "extender.hostNetwork=true",
        "--set", "image.repository=registry.example/gpupool,image.tag=dev",
    )  # fmt: skip
    agent = _container(docs, "DaemonSet", "gpupool-agent")
    args = _parse(agent["args"])
    assert (args.fake_gpus, args.vgpu_per_card) == ("2xA100-80GB", 4)
    pod = _one(docs, "DaemonSet", "gpupool-agent")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true", "gpupool.io/test": "yes"}
    extender = _one(docs, "Deployment", "gpupool-extender")["spec"]["template"]["spec"]
    assert extender["hostNetwork"] is True
    assert extender["dnsPolicy"] == "ClusterFirstWithHostNet"  # still resolves Service names
    images = {
        c["image"]
        for d in docs
        if d["kind"] in ("Deployment", "DaemonSet")
        for c in [*d["spec"]["template"]["spec"].get("initContainers", []),
                  *d["spec"]["template"]["spec"]["containers"]]
    }  # fmt: skip
    assert images == {"registry.example/gpupool:dev"}


# ---- monitoring --------------------------------------------------------------------------------


def test_each_components_metrics_port_is_served_declared_and_behind_its_service(
    helm: Path,
) -> None:
    docs = _template(helm, "--set", "webhook.metricsPort=9500")
    workloads = {"agent": "DaemonSet", "controller": "Deployment", "webhook": "Deployment"}
    for component, kind in workloads.items():
        container = _container(docs, kind, f"gpupool-{component}")
        args = _parse(container["args"])
        [port] = [p for p in container["ports"] if p["name"] == "metrics"]
        assert args.metrics_address == f":{port['containerPort']}"  # what it serves, declared
        service = _one(docs, "Service", f"gpupool-{component}-metrics")
        assert service["spec"]["clusterIP"] == "None"  # every pod an endpoint (agents: each node)
        assert service["spec"]["ports"] == [
            {"name": "metrics", "port": port["containerPort"], "targetPort": "metrics",
             "protocol": "TCP"}
        ]  # fmt: skip
        labels = _one(docs, kind, f"gpupool-{component}")["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= labels.items()
    assert _parse(_container(docs, "Deployment", "gpupool-webhook")["args"]).metrics_address == (
        ":9500"
    )
    assert not [d for d in docs if d["kind"] == "ServiceMonitor"]  # off by default


def test_service_monitors_select_the_metrics_services_by_their_port(helm: Path) -> None:
    docs = _template(
        helm,
        "--set", "monitoring.serviceMonitors.enabled=true",
        "--set", "monitoring.serviceMonitors.labels.release=kube-prometheus-stack",
    )  # fmt: skip
    monitors = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ServiceMonitor"}
    assert set(monitors) == {f"gpupool-{c}" for c in ("agent", "controller", "webhook", "extender")}
    services = [d for d in docs if d["kind"] == "Service"]
    for name, monitor in monitors.items():
        spec = monitor["spec"]
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        assert spec["namespaceSelector"] == {"matchNames": ["gpupool-system"]}
        wanted = spec["selector"]["matchLabels"].items()
        chosen = [s for s in services if wanted <= s["metadata"]["labels"].items()]
        [endpoint] = spec["endpoints"]
        # exactly one Service, and it has the port the monitor scrapes
        assert len(chosen) == 1, f"{name} selects {[s['metadata']['name'] for s in chosen]}"
        assert endpoint["port"] in {p["name"] for p in chosen[0]["spec"]["ports"]}
        assert endpoint["relabelings"] == [{"targetLabel": "job", "replacement": name}]


def test_the_extenders_service_monitor_scrapes_https_with_its_ca_or_http_without_tls(
    helm: Path,
) -> None:
    docs = _template(helm, "--set", "monitoring.serviceMonitors.enabled=true")
    [endpoint] = _one(docs, "ServiceMonitor", "gpupool-extender")["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["scheme"]) == ("https", "https")
    ca = endpoint["tlsConfig"]["ca"]["secret"]
    assert ca == {"name": "gpupool-extender-tls", "key": "ca.crt"}
    assert "ca.crt" in _one(docs, "Secret", ca["name"])["data"]
    plain = _template(
        helm, "--set", "monitoring.serviceMonitors.enabled=true",
        "--set", "extender.tls.enabled=false",
    )  # fmt: skip
    [endpoint] = _one(plain, "ServiceMonitor", "gpupool-extender")["spec"]["endpoints"]
    assert endpoint["port"] == "http" and "tlsConfig" not in endpoint
