"""The extender's TLS as the chart configures it (extender.tls): the pairs the chart makes, used
by gpupool's own code exactly as the chart's Deployment and scheduler configuration name them.

The chart's secrets are written to files, the extender's command line from the Deployment is
parsed by gpupool's parser, and two real aiohttp apps serve HTTPS with them on loopback ports: a
leader and a standby that forwards binds to the leader's https URL with `client_context` (the
serving pair as its client certificate). kube-scheduler's part is played by a client holding the
secret gpupool-extender-scheduler-client, checking the serving certificate's name as Go does.
That kube-scheduler itself takes the pair is tests/e2e/test_helm_real_node_e2e.py.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import io
import json
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from support.bind_api import BindApi, one_card_cache

from gpupool.adapters.extender_http.server import Metrics, make_app
from gpupool.adapters.extender_http.service import Extender
from gpupool.adapters.tls import server_context
from gpupool.cli.extender import client_context
from gpupool.cli.main import build_parser
from gpupool.devcluster.scheduler_config import ExtenderConfig

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "deploy" / "helm" / "gpupool"
MOUNT = "/var/run/gpupool/extender-tls"  # where the Deployment mounts gpupool-extender-tls
BODY = {"PodName": "p", "PodNamespace": "t", "PodUID": "uid-p", "Node": "n"}


def _template(helm: Path, *args: str, namespace: str = "gpu") -> list[dict[str, Any]]:
    done = subprocess.run(
        [str(helm), "template", "gpupool", str(CHART), "--namespace", namespace, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def _extender(docs: list[dict[str, Any]]) -> dict[str, Any]:
    pod = _one(docs, "Deployment", "gpupool-extender")["spec"]["template"]["spec"]
    container: dict[str, Any] = pod["containers"][0]
    return container


def _parse(argv: list[str]) -> argparse.Namespace:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return build_parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"`gpupool {' '.join(argv)}` does not parse: {err.getvalue().strip()}")


def _write_secret(docs: list[dict[str, Any]], name: str, folder: Path) -> dict[str, bytes]:
    secret = _one(docs, "Secret", name)
    assert secret["type"] == "kubernetes.io/tls"
    files = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    folder.mkdir()
    for key, data in files.items():
        (folder / key).write_bytes(data)
    return files


def _entries(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    configmap = _one(docs, "ConfigMap", "gpupool-scheduler-config")
    entries: list[dict[str, Any]] = yaml.safe_load(configmap["data"]["kube-scheduler-config.yaml"])[
        "extenders"
    ]
    return entries


def _config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The first extender entry (gpupool's pods: filter, prioritize, bind)."""
    return dict(_entries(docs)[0])


def _usages(cert: x509.Certificate) -> set[x509.ObjectIdentifier]:
    return set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def _cn(cert: x509.Certificate) -> str:
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


# ---- the certificates and the files that name them --------------------------------------------


def test_the_chart_makes_a_serving_pair_and_kube_schedulers_client_pair_from_one_ca(
    helm: Path, tmp_path: Path
) -> None:
    docs = _template(
        helm,
        "--set", "scheduler.extenderURL=https://10.0.0.7:8888/gpupool",
        "--set", "extender.tls.extraDNSNames={extender.example}",
        "--set", "extender.tls.schedulerClientName=my-scheduler",
    )  # fmt: skip
    serving = _write_secret(docs, "gpupool-extender-tls", tmp_path / "serving")
    client = _write_secret(docs, "gpupool-extender-scheduler-client", tmp_path / "client")
    ca_secret = _one(docs, "Secret", "gpupool-extender-ca")["data"]
    assert set(serving) == set(client) == {"ca.crt", "tls.crt", "tls.key"}
    assert serving["ca.crt"] == client["ca.crt"] == base64.b64decode(ca_secret["tls.crt"])
    ca = x509.load_pem_x509_certificate(serving["ca.crt"])
    cert = x509.load_pem_x509_certificate(serving["tls.crt"])
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(names.get_values_for_type(x509.DNSName)) == {
        "gpupool-extender.gpu.svc", "gpupool-extender.gpu.svc.cluster.local",
        "gpupool-extender.gpu", "extender.example",
    }  # fmt: skip
    # the host of scheduler.extenderURL, which kube-scheduler checks the certificate against
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["10.0.0.7"]
    # serving, and a client certificate too: a standby forwards binds with it
    assert _cn(cert) == "gpupool-extender"
    assert {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH} <= _usages(cert)
    scheduler = x509.load_pem_x509_certificate(client["tls.crt"])
    scheduler.verify_directly_issued_by(ca)
    assert _cn(scheduler) == "my-scheduler"
    assert ExtendedKeyUsageOID.CLIENT_AUTH in _usages(scheduler)
    # The extender serves the mounted secret and lets in the scheduler's name and its own.
    args = _parse(_extender(docs)["args"])
    assert (args.tls_cert, args.tls_key, args.client_ca) == (
        Path(f"{MOUNT}/tls.crt"), Path(f"{MOUNT}/tls.key"), Path(f"{MOUNT}/ca.crt"),
    )  # fmt: skip
    assert set(args.allowed_client) == {"my-scheduler", "gpupool-extender"}
    # kube-scheduler's configuration names the client secret's keys, in scheduler.tlsDir
    assert (
        _entries(docs)
        == ExtenderConfig(
            url_prefix="https://10.0.0.7:8888/gpupool",
            ca_file=Path("/etc/kubernetes/gpupool-extender/ca.crt"),
            cert_file=Path("/etc/kubernetes/gpupool-extender/tls.crt"),
            key_file=Path("/etc/kubernetes/gpupool-extender/tls.key"),
        ).entries()
    )


def test_the_extender_pod_serves_https_and_probes_it(helm: Path) -> None:
    docs = _template(helm)
    container = _extender(docs)
    args = _parse(container["args"])
    assert args.advertise_url == f"https://$(POD_IP):{args.port}"
    assert {"name": "https", "containerPort": args.port, "protocol": "TCP"} in container["ports"]
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    [port] = _one(docs, "Service", "gpupool-extender")["spec"]["ports"]
    assert port["targetPort"] == "https"
    pod = _one(docs, "Deployment", "gpupool-extender")["spec"]["template"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "gpupool-extender-tls"
    assert {"name": "tls", "mountPath": MOUNT, "readOnly": True} in container["volumeMounts"]
    # a new serving pair restarts the pods
    assert "checksum/extender-tls" in pod["metadata"]["annotations"]
    [rule] = _one(docs, "NetworkPolicy", "gpupool-extender")["spec"]["ingress"]
    assert rule["ports"] == [{"port": "https", "protocol": "TCP"}]
    assert _config(docs)["urlPrefix"] == "https://gpupool-extender.gpu.svc:8888/gpupool"
    assert _config(docs)["enableHTTPS"] is True


def test_without_tls_the_extender_is_plain_http_and_needs_no_secret(helm: Path) -> None:
    docs = _template(helm, "--set", "extender.tls.enabled=false")
    container = _extender(docs)
    args = _parse(container["args"])
    assert (args.tls_cert, args.client_ca, args.allowed_client) == (None, None, None)
    assert args.advertise_url.startswith("http://$(POD_IP):")
    assert "scheme" not in container["readinessProbe"]["httpGet"]
    assert not [d for d in docs if d["kind"] == "Secret" and "extender" in d["metadata"]["name"]]
    pod = _one(docs, "Deployment", "gpupool-extender")["spec"]["template"]["spec"]
    assert [v["name"] for v in pod["volumes"]] == ["tmp"]
    assert (
        _entries(docs)
        == ExtenderConfig(url_prefix="http://gpupool-extender.gpu.svc:8888/gpupool").entries()
    )


def test_cert_manager_issues_both_pairs_from_a_ca_of_the_extenders_own(helm: Path) -> None:
    docs = _template(
        helm,
        "--set",
        "extender.tls.source=cert-manager",
        "--set",
        "extender.tls.extraIPs={10.1.2.3}",
    )
    assert not [d for d in docs if d["kind"] == "Secret" and "extender" in d["metadata"]["name"]]
    serving = _one(docs, "Certificate", "gpupool-extender")["spec"]
    assert serving["secretName"] == "gpupool-extender-tls"
    assert serving["commonName"] == "gpupool-extender"
    assert {"server auth", "client auth"} <= set(serving["usages"])
    assert "gpupool-extender.gpu.svc" in serving["dnsNames"]
    assert serving["ipAddresses"] == ["10.1.2.3"]
    client = _one(docs, "Certificate", "gpupool-extender-scheduler-client")["spec"]
    assert client["secretName"] == "gpupool-extender-scheduler-client"
    assert client["commonName"] == "system:kube-scheduler"
    assert "client auth" in client["usages"] and "server auth" not in client["usages"]
    ca = _one(docs, "Certificate", "gpupool-extender-ca")["spec"]
    assert ca["isCA"] and ca["secretName"] == "gpupool-extender-ca"
    for spec in (serving, client):
        assert spec["issuerRef"] == {"name": "gpupool-extender-ca", "kind": "Issuer"}
    assert _one(docs, "Issuer", "gpupool-extender-ca")["spec"] == {
        "ca": {"secretName": "gpupool-extender-ca"}
    }
    # the pod template carries no checksum: cert-manager renews behind helm's back
    pod = _one(docs, "Deployment", "gpupool-extender")["spec"]["template"]
    assert "checksum/extender-tls" not in (pod["metadata"].get("annotations") or {})


# ---- the pairs at work: kube-scheduler -> standby -> leader -----------------------------------


@contextlib.asynccontextmanager
async def _serving(app: web.Application, context: ssl.SSLContext) -> AsyncIterator[int]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    try:
        yield int(runner.addresses[0][1])
    finally:
        await runner.cleanup()


async def _post(url: str, context: ssl.SSLContext) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, json=BODY, ssl=context) as resp,
    ):
        return resp.status, json.loads(await resp.read())


def test_kube_schedulers_pair_binds_through_a_standby_that_forwards_to_the_leader(
    helm: Path, tmp_path: Path
) -> None:
    docs = _template(helm, "--set", "extender.tls.extraIPs={127.0.0.1}")
    _write_secret(docs, "gpupool-extender-tls", tmp_path / "serving")
    client = tmp_path / "client"
    _write_secret(docs, "gpupool-extender-scheduler-client", client)
    argv = [a.replace(MOUNT, str(tmp_path / "serving")) for a in _extender(docs)["args"]]
    args = _parse(argv)
    callers = frozenset(args.allowed_client)
    scheduler = ssl.create_default_context(cafile=str(client / "ca.crt"))  # checks the name too
    scheduler.load_cert_chain(str(client / "tls.crt"), str(client / "tls.key"))
    anonymous = ssl.create_default_context(cafile=str(client / "ca.crt"))

    async def main() -> None:
        leader_api, standby_api = BindApi(), BindApi()
        standby_metrics = Metrics()
        leader_url: list[str] = []
        leader = make_app(Extender(one_card_cache(), leader_api, policy="binpack"), callers=callers)
        standby = make_app(
            Extender(one_card_cache(), standby_api, policy="binpack"),
            metrics=standby_metrics,
            is_leader=lambda: False,
            leader_url=lambda: leader_url[0],
            callers=callers,
            forward_ssl=client_context(args),
        )
        context = server_context(args.tls_cert, args.tls_key, args.client_ca)
        async with _serving(leader, context) as a, _serving(standby, context) as b:
            leader_url.append(f"https://127.0.0.1:{a}")
            refused = await _post(f"https://127.0.0.1:{b}/gpupool/bind", anonymous)
            bound = await _post(f"https://127.0.0.1:{b}/gpupool/bind", scheduler)
        assert refused[0] == 403, refused
        assert "no verified client certificate" in refused[1]["error"], refused
        assert bound == (200, {"Error": ""}), bound
        # the leader bound it: the Binding first (its lease follows, in the background)
        assert leader_api.writes[0] == "bind t/p n", leader_api.writes
        assert standby_api.writes == []
        assert standby_metrics.bind_forwards.labels("ok")._value.get() == 1

    asyncio.run(main())
