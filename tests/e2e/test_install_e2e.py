"""The install manifests and the Helm chart against a real kube-apiserver and the real
kube-scheduler binary.

`kubectl apply --dry-run=server` runs every object of deploy/kustomization.yaml through the API
server's decoding (strict: an unknown field fails), defaulting, validation and admission without
storing it; the namespace and the CRDs are applied for real first, since namespaced objects and
CRD-backed kinds need them. install/webhook-cert.yaml and install/extender-tls.yaml are left
out: their kinds (cert-manager's Certificate and Issuer) exist only where cert-manager is
installed, and this cluster has none.
kube-scheduler reads deploy/scheduler/kube-scheduler-config.yaml with its own strict decoder and
validation (`--write-config-to` loads, validates, writes and exits, contacting nothing).

`helm install` puts the chart (deploy/helm/gpupool, its defaults: the webhook certificate made
by the chart) into the cluster for real: every object it renders is created by the API server
(decoding, validation, admission, storage), `helm upgrade` keeps the certificate the webhooks
trust, and `helm uninstall` removes it all again (the webhook configurations it registers would
otherwise hold every later pod of the session).

This file's cluster has only kwok's fake nodes, so nothing it installs runs: the Deployments,
the DaemonSet and the webhook run as pods on a real kubelet in test_helm_real_node_e2e.py;
tests/image builds the image. No GPU runs anywhere in the suite.
"""

from __future__ import annotations

import base64
import datetime as dt
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from gpupool.adapters import tls as pki
from gpupool.devcluster.errors import ApiError
from gpupool.devcluster.polling import poll_until

if TYPE_CHECKING:
    from conftest import E2ECluster

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
# they need cert-manager's CRDs
CERT_MANAGER_FILES = {"install/webhook-cert.yaml", "install/extender-tls.yaml"}
CHART = DEPLOY / "helm" / "gpupool"
EXTENDER_SECRETS = (
    "gpupool-extender-ca",
    "gpupool-extender-tls",
    "gpupool-extender-scheduler-client",
)
NAMESPACE = "gpupool-system"
FIRST = ("rbac/namespace.yaml", "crds/gpulease.yaml", "crds/gpunode.yaml", "crds/gpupool.yaml",
         "crds/gpuquota.yaml")  # fmt: skip


def _resources() -> list[str]:
    resources: list[str] = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"]
    return resources


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _kubectl(
    c: E2ECluster, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(c.binaries.kubectl), "--kubeconfig", str(c.kubeconfig), *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=120,
    )


def _established(c: E2ECluster, name: str) -> bool:
    crd = c.api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(x["type"] == "Established" and x["status"] == "True" for x in conditions)


@pytest.fixture(scope="module")
def cluster(dev_cluster: E2ECluster) -> E2ECluster:
    """The session's bare control plane with gpupool's namespace and CRDs applied for real."""
    assert set(FIRST) <= set(_resources())
    applied = _kubectl(dev_cluster, "apply", *[a for f in FIRST for a in ("-f", str(DEPLOY / f))])
    assert applied.returncode == 0, applied.stderr
    for path in FIRST:
        for doc in _docs(DEPLOY / path):
            if doc["kind"] == "CustomResourceDefinition":
                name = doc["metadata"]["name"]
                assert poll_until(lambda n=name: _established(dev_cluster, n), timeout_s=30), name
    return dev_cluster


def test_every_manifest_passes_a_server_side_dry_run(cluster: E2ECluster) -> None:
    files = [f for f in _resources() if f not in CERT_MANAGER_FILES]
    result = _kubectl(
        cluster, "apply", "--dry-run=server", *[a for f in files for a in ("-f", str(DEPLOY / f))]
    )
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.endswith("(server dry run)")]
    expected = sum(len(_docs(DEPLOY / f)) for f in files)
    assert len(lines) == expected, result.stdout
    for name in ("gpupool-extender", "gpupool-controller", "gpupool-webhook"):
        assert f"deployment.apps/{name} created (server dry run)" in lines
    assert "daemonset.apps/gpupool-agent created (server dry run)" in lines
    # A dry run stores nothing: the webhook configurations would otherwise intercept every pod.
    with pytest.raises(ApiError):
        cluster.api.get(
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/gpupool"
        )
    with pytest.raises(ApiError):
        cluster.api.get("/apis/apps/v1/namespaces/gpupool-system/deployments/gpupool-extender")


def _misspelt_field(pod: dict[str, Any]) -> str:
    pod["containers"][0]["volumeMountz"] = pod["containers"][0].pop("volumeMounts")
    return "volumeMountz"


def _invalid_value(pod: dict[str, Any]) -> str:
    pod["volumes"][0]["hostPath"]["type"] = "Folder"
    return "Folder"


@pytest.mark.parametrize("breakage", [_misspelt_field, _invalid_value])
def test_the_dry_run_rejects_a_broken_manifest(
    cluster: E2ECluster, breakage: Callable[[dict[str, Any]], str]
) -> None:
    # The check above can fail: one bad field in the agent's DaemonSet and the API server refuses.
    [daemonset] = _docs(DEPLOY / "install" / "agent.yaml")
    named = breakage(daemonset["spec"]["template"]["spec"])
    result = _kubectl(
        cluster, "apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(daemonset)
    )
    assert result.returncode != 0
    assert named in result.stderr, result.stderr


def test_the_kustomization_builds_exactly_the_listed_files(cluster: E2ECluster) -> None:
    result = _kubectl(cluster, "kustomize", str(DEPLOY))
    assert result.returncode == 0, result.stderr
    built = [d for d in yaml.safe_load_all(result.stdout) if d]

    def key(d: dict[str, Any]) -> tuple[str, str, str]:
        return d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]

    listed = [d for f in _resources() for d in _docs(DEPLOY / f)]
    assert sorted(map(key, built)) == sorted(map(key, listed))


def test_kube_scheduler_accepts_the_scheduler_configuration(
    cluster: E2ECluster, tmp_path: Path
) -> None:
    config = yaml.safe_load((DEPLOY / "scheduler" / "kube-scheduler-config.yaml").read_text())
    config["clientConnection"]["kubeconfig"] = str(cluster.kubeconfig)  # a file that exists here
    # kube-scheduler loads the extender's tlsConfig files at start: a pair where the chart's
    # secret would be copied (scheduler.tlsDir), issued by a CA made here
    tls = config["extenders"][0]["tlsConfig"]
    folder = tmp_path / "gpupool-extender"
    folder.mkdir()
    ca = pki.Authority("test-extender-ca", dt.datetime.now(dt.UTC))
    cert, key = ca.issue(pki.name("system:kube-scheduler"), server=False)
    for field, stem in (("caFile", "ca.crt"), ("certFile", "tls.crt"), ("keyFile", "tls.key")):
        assert Path(tls[field]).name == stem, tls
        tls[field] = str(folder / stem)
    config["extenders"][1]["tlsConfig"] = dict(tls)  # the second entry: the same pair
    pki.write_cert(folder / "ca.crt", ca.cert)
    pki.write_cert(folder / "tls.crt", cert)
    pki.write_key(folder / "tls.key", key)
    path = tmp_path / "scheduler.yaml"
    path.write_text(yaml.safe_dump(config))
    written = tmp_path / "effective.yaml"
    result = subprocess.run(
        [
            str(cluster.binaries.kube_scheduler),
            "--config", str(path),
            "--write-config-to", str(written),
            "--secure-port", "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    effective = yaml.safe_load(written.read_text())
    extender, cpu_pods = effective["extenders"]
    assert extender["urlPrefix"] == config["extenders"][0]["urlPrefix"]
    assert extender["enableHTTPS"] is True and extender["tlsConfig"]["certFile"] == tls["certFile"]
    assert {r["name"] for r in extender["managedResources"]} == {
        r["name"] for r in config["extenders"][0]["managedResources"]
    }
    # the second entry: every pod's score only, skipped while the extender does not answer
    assert cpu_pods["prioritizeVerb"] == "prioritize-cpu" and cpu_pods["ignorable"] is True
    assert not cpu_pods.get("managedResources") and not cpu_pods.get("bindVerb")
    assert effective["percentageOfNodesToScore"] == 100
    # ... and refuses a misspelt field (strict decoding), so the test above can fail.
    config["extenders"][0]["filterVerbs"] = config["extenders"][0].pop("filterVerb")
    path.write_text(yaml.safe_dump(config))
    refused = subprocess.run(
        [str(cluster.binaries.kube_scheduler), "--config", str(path),
         "--write-config-to", str(written), "--secure-port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "filterVerbs" in refused.stderr


# ---- the Helm chart ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def helm(
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[..., subprocess.CompletedProcess[str]]:
    """tools/helm/build.sh's helm (skip only where it cannot be built), with its own config,
    cache and data folders, so the test touches nothing of the user's."""
    built = subprocess.run(
        [str(REPO / "tools" / "helm" / "build.sh")], capture_output=True, text=True, timeout=1800
    )
    if built.returncode != 0:
        pytest.skip(f"helm cannot be built here: {built.stderr[-2000:]}")
    binary = built.stdout.strip().splitlines()[-1]
    home = tmp_path_factory.mktemp("helm-home")
    env = {
        **os.environ,
        **{f"HELM_{kind}_HOME": str(home / kind.lower()) for kind in ("CACHE", "CONFIG", "DATA")},
    }

    def run(c: E2ECluster, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [binary, "--kubeconfig", str(c.kubeconfig), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )

    return run


def _path(doc: dict[str, Any]) -> str:
    """The API path of an object the chart renders (every kind it has)."""
    group_version = doc["apiVersion"]
    prefix = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    plural = {
        "ServiceAccount": "serviceaccounts", "ClusterRole": "clusterroles",
        "ClusterRoleBinding": "clusterrolebindings", "Role": "roles", "RoleBinding": "rolebindings",
        "Service": "services", "Deployment": "deployments", "DaemonSet": "daemonsets",
        "PodDisruptionBudget": "poddisruptionbudgets", "Secret": "secrets",
        "ConfigMap": "configmaps", "NetworkPolicy": "networkpolicies",
        "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
        "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
        "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
        "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
    }[doc["kind"]]  # fmt: skip
    namespace = doc["metadata"].get("namespace")
    where = f"/namespaces/{namespace}" if namespace else ""
    return f"{prefix}{where}/{plural}/{doc['metadata']['name']}"


def _release(
    c: E2ECluster, helm: Callable[..., subprocess.CompletedProcess[str]]
) -> list[dict[str, Any]]:
    got = helm(c, "get", "manifest", "gpupool", "-n", NAMESPACE)
    assert got.returncode == 0, got.stderr
    return [d for d in yaml.safe_load_all(got.stdout) if d]


@pytest.fixture
def installed(
    cluster: E2ECluster, helm: Callable[..., subprocess.CompletedProcess[str]]
) -> Iterator[list[dict[str, Any]]]:
    """The chart installed with its defaults; uninstalled after the test, whatever happened."""
    done = helm(cluster, "install", "gpupool", str(CHART), "-n", NAMESPACE)
    try:
        assert done.returncode == 0, done.stderr
        yield _release(cluster, helm)
    finally:
        helm(cluster, "uninstall", "gpupool", "-n", NAMESPACE, "--wait", "--timeout", "120s")


def test_helm_install_creates_every_object_the_chart_renders(
    cluster: E2ECluster,
    helm: Callable[..., subprocess.CompletedProcess[str]],
    installed: list[dict[str, Any]],
) -> None:
    kinds = {d["kind"] for d in installed}
    assert {
        "Deployment",
        "DaemonSet",
        "Secret",
        "ConfigMap",
        "MutatingWebhookConfiguration",
    } <= kinds
    for doc in installed:
        stored = cluster.api.get(_path(doc))
        assert stored["metadata"]["annotations"]["meta.helm.sh/release-name"] == "gpupool"
    names = {d["metadata"]["name"] for d in installed if d["kind"] == "Deployment"}
    assert names == {"gpupool-extender", "gpupool-controller", "gpupool-webhook", "gpupool-web"}
    # The webhooks trust the CA of the certificate the webhook serves (the chart made both).
    secret = cluster.api.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/gpupool-webhook-tls")
    webhooks = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/gpupool"
    [hook] = cluster.api.get(webhooks)["webhooks"]
    assert hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    assert base64.b64decode(secret["data"]["ca.crt"]).startswith(b"-----BEGIN CERTIFICATE-----")
    extender_tls = {
        name: cluster.api.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/{name}")["data"]
        for name in EXTENDER_SECRETS
    }
    # An upgrade keeps that certificate: a new one would leave running webhooks untrusted.
    upgraded = helm(cluster, "upgrade", "gpupool", str(CHART), "-n", NAMESPACE)
    assert upgraded.returncode == 0, upgraded.stderr
    again = cluster.api.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/gpupool-webhook-tls")
    assert again["data"] == secret["data"]
    for name, kept in extender_tls.items():  # and the extender's pairs: kube-scheduler holds one
        assert cluster.api.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/{name}")["data"] == kept
    [hook] = cluster.api.get(webhooks)["webhooks"]
    assert hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    # Uninstalled, nothing of it is left (CRDs aside: helm never deletes those).
    gone = helm(cluster, "uninstall", "gpupool", "-n", NAMESPACE, "--wait", "--timeout", "120s")
    assert gone.returncode == 0, gone.stderr
    for doc in installed:
        assert cluster.api.find(_path(doc)) is None, _path(doc)


def test_the_api_server_refuses_an_install_with_an_invalid_value(
    cluster: E2ECluster, helm: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    # The install above can fail: the API server validates what the chart renders (here the
    # DaemonSet's runtimeClassName, not a DNS name), and --atomic takes the half-made release
    # out again.
    try:
        done = helm(
            cluster, "install", "gpupool", str(CHART), "-n", NAMESPACE, "--atomic",
            "--timeout", "120s", "--set", "agent.runtimeClassName=Not_A_Name",
        )  # fmt: skip
        assert done.returncode != 0
        assert "spec.template.spec.runtimeClassName: Invalid value" in done.stderr, done.stderr
        assert helm(cluster, "status", "gpupool", "-n", NAMESPACE).returncode != 0
        secret = f"/api/v1/namespaces/{NAMESPACE}/secrets/gpupool-webhook-tls"
        assert poll_until(lambda: cluster.api.find(secret) is None, timeout_s=60)
    finally:
        helm(cluster, "uninstall", "gpupool", "-n", NAMESPACE, "--wait", "--timeout", "120s")
