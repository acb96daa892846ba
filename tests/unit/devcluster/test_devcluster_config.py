"""Scheduler configuration, certificates, kubeconfig and the pinned versions."""

from __future__ import annotations

import re
import ssl
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from gpupool.devcluster import binaries
from gpupool.devcluster.certs import generate_pki
from gpupool.devcluster.control_plane import KWOK_CONFIG
from gpupool.devcluster.kubeconfig import write_kubeconfig
from gpupool.devcluster.scheduler_config import ExtenderConfig, scheduler_configuration

REPO = Path(__file__).resolve().parents[3]


def test_plain_scheduler_configuration_has_no_extender() -> None:
    config = scheduler_configuration(Path("/k"))
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert config["clientConnection"]["kubeconfig"] == "/k"
    assert "extenders" not in config


def test_extender_configuration() -> None:
    extender = ExtenderConfig("http://127.0.0.1:9000/gpupool", weight=7, http_timeout_s=2.5)
    config = scheduler_configuration(Path("/k"), extender)
    # every feasible node scored: the planner's pick is among them
    assert config["percentageOfNodesToScore"] == 100
    entry, cpu_pods = config["extenders"]
    assert entry == {
        "urlPrefix": "http://127.0.0.1:9000/gpupool",
        "filterVerb": "filter",
        "prioritizeVerb": "prioritize",
        "bindVerb": "bind",
        "weight": 7,
        "nodeCacheCapable": True,
        "enableHTTPS": False,
        "httpTimeout": "2.5s",
        "managedResources": [
            {"name": "gpupool.io/vgpu", "ignoredByScheduler": True},
            {"name": "gpupool.io/gpu-memory", "ignoredByScheduler": True},
            {"name": "gpupool.io/gpu-compute", "ignoredByScheduler": True},
            {"name": "gpupool.io/gpu", "ignoredByScheduler": True},
        ],
    }
    # every other pod: scored only, and skipped while the extender does not answer
    assert cpu_pods == {
        "urlPrefix": "http://127.0.0.1:9000/gpupool",
        "prioritizeVerb": "prioritize-cpu",
        "weight": 7,
        "nodeCacheCapable": True,
        "enableHTTPS": False,
        "httpTimeout": "2s",
        "ignorable": True,
    }


def test_pki_chain_and_identities(tmp_path: Path) -> None:
    pki = generate_pki(tmp_path)
    ca = x509.load_pem_x509_certificate(pki.ca.cert.read_bytes())
    server = x509.load_pem_x509_certificate(pki.apiserver.cert.read_bytes())
    admin = x509.load_pem_x509_certificate(pki.admin.cert.read_bytes())
    server.verify_directly_issued_by(ca)
    admin.verify_directly_issued_by(ca)
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "127.0.0.1" in {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
    orgs = admin.subject.get_attributes_for_oid(x509.oid.NameOID.ORGANIZATION_NAME)
    assert [o.value for o in orgs] == ["system:masters"]
    assert pki.admin.key.stat().st_mode & 0o077 == 0
    # Python's ssl accepts the pair as a client identity.
    context = ssl.create_default_context(cafile=str(pki.ca.cert))
    context.load_cert_chain(str(pki.admin.cert), str(pki.admin.key))


def test_kubeconfig_embeds_credentials(tmp_path: Path) -> None:
    pki = generate_pki(tmp_path / "pki")
    path = write_kubeconfig(
        tmp_path / "kc", "https://127.0.0.1:1", pki.ca.cert, pki.admin.cert, pki.admin.key, "a"
    )
    config = yaml.safe_load(path.read_text())
    assert config["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:1"
    assert config["users"][0]["user"]["client-key-data"]
    assert path.stat().st_mode & 0o077 == 0


def _go_mod_version(module_dir: str, module: str) -> str:
    text = (REPO / "tools" / "k8s" / module_dir / "go.mod").read_text()
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)\s*$", text, re.M)
    assert match, f"{module} not required in tools/k8s/{module_dir}/go.mod"
    return match.group(1)


def test_versions_match_the_go_modules() -> None:
    assert _go_mod_version("kubernetes", "k8s.io/kubernetes") == binaries.KUBERNETES_VERSION
    assert _go_mod_version("etcd", "go.etcd.io/etcd/server/v3") == binaries.ETCD_VERSION
    assert _go_mod_version("kwok", "sigs.k8s.io/kwok") == binaries.KWOK_VERSION
    staging = _go_mod_version("kubernetes", "k8s.io/client-go => k8s.io/client-go")
    assert staging == "v0" + binaries.KUBERNETES_VERSION[2:]


def test_bin_dir_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPOOL_K8S_BIN", "/somewhere/bin")
    assert binaries.default_bin_dir() == Path("/somewhere/bin")
    monkeypatch.delenv("GPUPOOL_K8S_BIN")
    assert binaries.default_bin_dir().parent.name == binaries.version_tag()


def test_build_script_builds_every_binary_the_cluster_runs() -> None:
    script = (REPO / "tools" / "k8s" / "build.sh").read_text()
    kube = re.search(r"^kube_commands=\((.*)\)$", script, re.MULTILINE)
    assert kube, "kube_commands=(...) not found in tools/k8s/build.sh"
    built = {*kube.group(1).split(), "etcd", "kwok"}
    assert {*binaries.COMPONENTS, binaries.KUBELET} <= built
    tools_go = (REPO / "tools" / "k8s" / "kubernetes" / "tools.go").read_text()
    for command in kube.group(1).split():
        assert f'"k8s.io/kubernetes/cmd/{command}"' in tools_go, command


def test_the_kubelet_is_looked_up_beside_the_other_binaries(tmp_path: Path) -> None:
    for name in binaries.COMPONENTS:
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    found = binaries.Binaries.locate(tmp_path)
    with pytest.raises(binaries.BinaryMissing, match=r"kubelet not found in .*make k8s"):
        found.kubelet()
    (tmp_path / "kubelet").write_text("#!/bin/sh\n")
    (tmp_path / "kubelet").chmod(0o755)
    assert found.kubelet() == tmp_path.resolve() / "kubelet"


def test_kwok_configuration_carries_the_default_stages() -> None:
    """kwok v0.8 applies no stages of its own: without these the fake nodes never turn Ready."""
    documents = list(yaml.safe_load_all(KWOK_CONFIG))
    assert documents[0]["kind"] == "KwokConfiguration"
    # kwok v0.8 does not default a file's options: zero parallelism stops it at start
    assert documents[0]["options"]["podPlayStageParallelism"] > 0
    assert documents[0]["options"]["nodePlayStageParallelism"] > 0
    stages = {d["metadata"]["name"]: d["spec"]["resourceRef"]["kind"] for d in documents[1:]}
    assert stages == {
        "node-initialize": "Node",
        "node-heartbeat-with-lease": "Node",
        "pod-ready": "Pod",
        "pod-complete": "Pod",
        "pod-delete": "Pod",
    }
    assert all(d["kind"] == "Stage" for d in documents[1:])
