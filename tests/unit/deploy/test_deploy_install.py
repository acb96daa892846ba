"""deploy/install, deploy/scheduler, deploy/kustomization.yaml and the Dockerfile, checked against
gpupool's own code without a cluster: every gpupool command line parses with gpupool's parser,
ports and names agree between flags, containers, probes and Services, every ServiceAccount is
in deploy/rbac, the webhook configurations and the scheduler's extender entry equal what the code
builds, and the agent's host paths are the ones the device plugin hands the kubelet.

That the API server accepts the objects is tests/e2e/test_install_e2e.py (server-side dry run).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import re
import tomllib
import urllib.parse
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from gpupool.adapters.tls import Authority, write_cert, write_key
from gpupool.adapters.tls import name as tls_name
from gpupool.adapters.webhook import register as registration
from gpupool.adapters.webhook.certs import ensure_serving_cert
from gpupool.cli import webhook as webhook_cli
from gpupool.cli.main import build_parser
from gpupool.devcluster.scheduler_config import ExtenderConfig
from gpupool.node.device_plugin.decide import PluginPaths

REPO = Path(__file__).resolve().parents[3]
DEPLOY = REPO / "deploy"
INSTALL = DEPLOY / "install"
SCHEDULER_CONFIG = DEPLOY / "scheduler" / "kube-scheduler-config.yaml"
DOCKERFILE = REPO / "Dockerfile"
CERT_MANAGER_FILE = "install/webhook-cert.yaml"
WORKLOADS = ("Deployment", "DaemonSet")
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
IMAGE = f"gpupool:{VERSION}"
SECRET_PATHS = ("ca.crt", "tls.crt", "tls.key")  # ServingCert's order


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _install() -> list[dict[str, Any]]:
    return [d for path in sorted(INSTALL.glob("*.yaml")) for d in _docs(path)]


def _rbac() -> list[dict[str, Any]]:
    return [d for path in sorted((DEPLOY / "rbac").glob("*.yaml")) for d in _docs(path)]


def _one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def _workloads() -> list[dict[str, Any]]:
    return [d for d in _install() if d["kind"] in WORKLOADS]


def _pod(workload: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def _gpupool_containers() -> Iterator[tuple[str, dict[str, Any]]]:
    for workload in _workloads():
        for container in _containers(_pod(workload)):
            if container.get("command") == ["gpupool"]:
                yield f"{workload['metadata']['name']}/{container['name']}", container


GPUPOOL_CONTAINERS = dict(_gpupool_containers())


def _parse(argv: list[str]) -> argparse.Namespace:
    """gpupool's own parser on `argv`; a failure names the bad flag instead of exiting."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return build_parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"`gpupool {' '.join(argv)}` does not parse: {err.getvalue().strip()}")


def _container(workload: str, container: str = "") -> dict[str, Any]:
    [found] = [
        c
        for key, c in GPUPOOL_CONTAINERS.items()
        if key.split("/")[0] == workload and (not container or key.split("/")[1] == container)
    ]
    return found


def _args(workload: str) -> argparse.Namespace:
    return _parse(_container(workload)["args"])


def _port(container: dict[str, Any], port: int | str) -> int:
    """A container port by number or by name."""
    for p in container.get("ports", []):
        if port in (p["containerPort"], p.get("name")):
            value: int = p["containerPort"]
            return value
    raise AssertionError(f"container {container['name']} has no port {port!r}")


def _service_target(service: dict[str, Any], container: dict[str, Any]) -> tuple[int, int]:
    """(Service port, the container port it sends to) for a one-port Service."""
    [port] = service["spec"]["ports"]
    return port["port"], _port(container, port.get("targetPort", port["port"]))


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def _pod_labels(workload_name: str) -> dict[str, str]:
    [workload] = [w for w in _workloads() if w["metadata"]["name"] == workload_name]
    labels: dict[str, str] = workload["spec"]["template"]["metadata"]["labels"]
    return labels


# ---- the file set ---------------------------------------------------------------------------


def test_the_kustomization_lists_every_manifest_once_the_namespace_first() -> None:
    resources = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"]
    assert len(resources) == len(set(resources))
    expected = {
        str(p.relative_to(DEPLOY))
        for folder in ("crds", "rbac", "policies", "install")
        for p in (DEPLOY / folder).glob("*.yaml")
    } - {"rbac/tenant.yaml"}  # a template to copy per tenant
    assert set(resources) == expected
    assert resources[0] == "rbac/namespace.yaml"
    # The webhook configurations last: from then on pod creation waits for the webhook.
    assert resources[-1] == "install/webhook-configurations.yaml"


def test_every_install_object_lives_in_gpupool_system_or_is_cluster_scoped() -> None:
    cluster_scoped = {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
    for doc in _install():
        namespace = doc["metadata"].get("namespace")
        if doc["kind"] in cluster_scoped:
            assert namespace is None, doc["metadata"]["name"]
        else:
            assert namespace == "gpupool-system", f"{doc['kind']}/{doc['metadata']['name']}"


# ---- command lines, images, accounts ----------------------------------------------------------


def test_there_is_one_gpupool_container_per_component() -> None:
    commands = sorted(_parse(c["args"]).command for c in GPUPOOL_CONTAINERS.values())
    assert commands == ["agent", "controller", "extender", "web", "webhook"]


@pytest.mark.parametrize("name", sorted(GPUPOOL_CONTAINERS))
def test_every_gpupool_command_line_parses_with_gpupools_parser(name: str) -> None:
    args = _parse(GPUPOOL_CONTAINERS[name]["args"])
    assert callable(getattr(args, "func", None)), f"{name}: no command chosen"


@pytest.mark.parametrize("name", sorted(GPUPOOL_CONTAINERS))
def test_every_variable_an_argument_names_is_in_the_containers_env(name: str) -> None:
    # Kubernetes expands $(VAR) only for variables the container defines; others stay literal.
    container = GPUPOOL_CONTAINERS[name]
    defined = {e["name"] for e in container.get("env", [])}
    named = {m for a in container["args"] for m in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", a)}
    assert named <= defined, f"{name}: {sorted(named - defined)} not in env"


def test_every_container_runs_the_one_gpupool_image_of_this_version() -> None:
    images = {
        f"{w['metadata']['name']}/{c['name']}": c["image"]
        for w in _workloads()
        for c in _containers(_pod(w))
    }
    assert images, "no containers"
    assert set(images.values()) == {IMAGE}, images


def test_the_image_runs_gpupool_and_carries_the_limiter() -> None:
    text = DOCKERFILE.read_text()
    # Every stage on the one base, a build argument whose default is the public image (so the
    # file builds anywhere; tools/image/build.sh passes a Debian base made here).
    assert re.search(r"^ARG BASE=python:3\.11-slim$", text, re.M)
    froms = re.findall(r"^FROM (\S+)", text, re.M)
    assert froms and all(f == "${BASE}" for f in froms)
    assert re.search(r'^ENTRYPOINT \["gpupool"\]$', text, re.M)
    assert re.search(r"^RUN make -C \S*native\b", text, re.M)


def test_every_service_account_is_in_deploy_rbac() -> None:
    accounts = {
        (d["metadata"]["namespace"], d["metadata"]["name"])
        for d in _rbac()
        if d["kind"] == "ServiceAccount"
    }
    for workload in _workloads():
        ns = workload["metadata"]["namespace"]
        account = _pod(workload).get("serviceAccountName")
        assert (ns, account) in accounts, f"{workload['metadata']['name']}: {account!r}"


def test_selectors_match_their_pods() -> None:
    workloads = _workloads()
    for w in workloads:
        assert _selects(w["spec"]["selector"]["matchLabels"], _pod_labels(w["metadata"]["name"]))
    for doc in _install():
        if doc["kind"] == "Service":
            selector = doc["spec"]["selector"]
        elif doc["kind"] == "PodDisruptionBudget":
            selector = doc["spec"]["selector"]["matchLabels"]
        else:
            continue
        chosen = [
            w["metadata"]["name"]
            for w in workloads
            if _selects(selector, _pod_labels(w["metadata"]["name"]))
        ]
        # a workload's Services are named after it (gpupool-agent-metrics: the agent's /metrics)
        owner = doc["metadata"]["name"].removesuffix("-metrics")
        assert chosen == [owner], f"{doc['kind']}/{doc['metadata']['name']}"


# ---- extender ---------------------------------------------------------------------------------


def test_the_extenders_port_probe_and_service_agree() -> None:
    container = _container("gpupool-extender")
    args = _parse(container["args"])
    assert args.host == "0.0.0.0", "listening on loopback, the Service cannot reach it"
    assert _port(container, "https") == args.port
    probe = container["readinessProbe"]["httpGet"]
    assert probe["path"] == "/healthz"
    assert probe["scheme"] == "HTTPS" and args.tls_cert is not None  # it serves TLS only
    assert _port(container, probe["port"]) == args.port
    service = _one(_install(), "Service", "gpupool-extender")
    assert _service_target(service, container)[1] == args.port


def _may_hold_lease(account: str, namespace: str, lease: str) -> bool:
    """deploy/rbac lets the gpupool-system ServiceAccount `account` get, create and update the
    coordination Lease `namespace`/`lease` through a RoleBinding in that namespace."""
    rbac = _rbac()
    subject = {"kind": "ServiceAccount", "name": account, "namespace": "gpupool-system"}
    bound = {
        b["roleRef"]["name"]
        for b in rbac
        if b["kind"] == "RoleBinding"
        and b["metadata"]["namespace"] == namespace
        and b["roleRef"]["kind"] == "Role"
        and subject in b["subjects"]
    }
    return any(
        r["kind"] == "Role"
        and r["metadata"]["namespace"] == namespace
        and r["metadata"]["name"] in bound
        and "coordination.k8s.io" in rule["apiGroups"]
        and "leases" in rule["resources"]
        and {"get", "create", "update"} <= set(rule["verbs"])
        and lease in rule.get("resourceNames", [lease])
        for r in rbac
        for rule in r.get("rules", [])
    )


def test_the_extender_elects_a_leader_per_pod_where_its_role_allows() -> None:
    deployment = _one(_install(), "Deployment", "gpupool-extender")
    assert deployment["spec"]["replicas"] == 2
    container = _container("gpupool-extender")
    args = _parse(container["args"])
    assert args.leader_elect
    env = {e["name"]: e for e in container["env"]}
    assert args.identity == "$(POD_NAME)"
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    # The leader advertises where the standby's forwarded binds reach it: its own pod, its port.
    advertised = urllib.parse.urlsplit(args.advertise_url)
    assert advertised.scheme == "https" and advertised.path == ""  # it serves TLS only
    assert args.advertise_url.startswith("https://$(POD_IP):")
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert advertised.port == args.port
    assert _may_hold_lease("gpupool-extender", args.leader_namespace, args.leader_name)


def test_the_controller_runs_two_replicas_that_elect_a_leader_where_its_role_allows() -> None:
    deployment = _one(_install(), "Deployment", "gpupool-controller")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    container = _container("gpupool-controller")
    args = _parse(container["args"])
    assert args.leader_elect, "two replicas without leader election would both reconcile"
    env = {e["name"]: e for e in container["env"]}
    assert args.identity == "$(POD_NAME)"  # one identity per pod, or both would "hold" the Lease
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert args.leader_renew_deadline_seconds < args.leader_lease_seconds
    # Its own Lease: on the extender's, one of the two components would never run.
    extender = _args("gpupool-extender")
    lease = (args.leader_namespace, args.leader_name)
    assert lease != (extender.leader_namespace, extender.leader_name)
    assert _may_hold_lease("gpupool-controller", *lease)


def test_the_scheduler_config_extender_is_what_the_code_builds_for_the_extender_service() -> None:
    config = yaml.safe_load(SCHEDULER_CONFIG.read_text())
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    extender = config["extenders"][0]
    tls = {k: Path(v) for k, v in extender["tlsConfig"].items()}
    assert (
        config["extenders"]
        == ExtenderConfig(
            url_prefix=extender["urlPrefix"],
            ca_file=tls["caFile"],
            cert_file=tls["certFile"],
            key_file=tls["keyFile"],
        ).entries()
    )
    assert config["percentageOfNodesToScore"] == 100
    # the files of the secret kube-scheduler's client pair is issued into, in one folder
    assert {p.name for p in tls.values()} == {"ca.crt", "tls.crt", "tls.key"}
    assert len({p.parent for p in tls.values()}) == 1
    client = _one(_install(), "Certificate", "gpupool-extender-scheduler-client")["spec"]
    assert client["commonName"] in _args("gpupool-extender").allowed_client
    match = re.fullmatch(r"https://([^.]+)\.([^.]+)\.svc:(\d+)/gpupool", extender["urlPrefix"])
    assert match, extender["urlPrefix"]
    service = _one(_install(), "Service", match[1])
    assert service["metadata"]["namespace"] == match[2]
    port, target = _service_target(service, _container("gpupool-extender"))
    assert port == int(match[3])
    assert target == _args("gpupool-extender").port


# ---- webhook ----------------------------------------------------------------------------------


def _webhook_registration() -> registration.Registration:
    """What the webhook container's command line would register behind its Service."""
    service = _one(_install(), "Service", "gpupool-webhook")
    container = _container("gpupool-webhook")
    port, target = _service_target(service, container)
    args = _parse(container["args"])
    assert target == args.port
    target_flag = f"{service['metadata']['namespace']}/{service['metadata']['name']}/{port}"
    config = webhook_cli._config(_parse([*container["args"], "--register-service", target_flag]))
    return registration.Registration(
        target=registration.Target(config.register_url, config.register_service),
        ca_bundle=b"",
        name=config.name,
        skip_namespaces=config.skip_namespaces,
        namespace_labels=dict(config.namespace_labels),
    )


def _without_ca_bundle(config: dict[str, Any]) -> dict[str, Any]:
    hooks = [
        {**h, "clientConfig": {k: v for k, v in h["clientConfig"].items() if k != "caBundle"}}
        for h in config["webhooks"]
    ]
    return {**config, "webhooks": hooks}


def test_the_webhook_configurations_are_what_the_webhook_would_register() -> None:
    manifests = _docs(INSTALL / "webhook-configurations.yaml")
    built = registration.configurations(_webhook_registration())
    assert [m["kind"] for m in manifests] == [b["kind"] for b in built]
    for manifest, expected in zip(manifests, built, strict=True):
        metadata = {k: v for k, v in manifest["metadata"].items() if k != "annotations"}
        assert metadata == expected["metadata"]
        assert {**manifest, "metadata": metadata} == _without_ca_bundle(expected)


def test_the_webhooks_port_probe_and_service_agree() -> None:
    container = _container("gpupool-webhook")
    args = _parse(container["args"])
    assert args.host == "0.0.0.0", "listening on loopback, the Service cannot reach it"
    assert _port(container, "https") == args.port
    probe = container["readinessProbe"]["httpGet"]
    assert (probe["path"], probe["scheme"]) == ("/healthz", "HTTPS")
    assert _port(container, probe["port"]) == args.port


def test_the_webhook_serves_the_cert_manager_certificate_it_is_trusted_by() -> None:
    issued = _docs(REPO / "deploy" / CERT_MANAGER_FILE)
    configs = _docs(INSTALL / "webhook-configurations.yaml")
    [reference] = {c["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] for c in configs}
    namespace, name = reference.split("/")
    certificate = _one(issued, "Certificate", name)
    assert certificate["metadata"]["namespace"] == namespace
    # The webhook reads the secret's files as they are only when they cover every --cert-host.
    container = _container("gpupool-webhook")
    args = _parse(container["args"])
    dns_names = set(certificate["spec"]["dnsNames"])
    assert args.cert_host and set(args.cert_host) <= dns_names
    service = _one(_install(), "Service", "gpupool-webhook")
    dialed = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    assert dialed in dns_names, "the API server dials the Service by this name"
    [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == str(args.cert_dir)]
    volumes = {
        v["name"]: v for v in _pod(_one(_install(), "Deployment", "gpupool-webhook"))["volumes"]
    }
    assert volumes[mount["name"]]["secret"]["secretName"] == certificate["spec"]["secretName"]
    # Signed by a CA issuer whose CA is itself a cert-manager certificate: ca.crt is that CA.
    issuer = _one(issued, "Issuer", certificate["spec"]["issuerRef"]["name"])
    ca = [
        c
        for c in issued
        if c["kind"] == "Certificate"
        and c["spec"]["secretName"] == issuer["spec"]["ca"]["secretName"]
    ]
    assert len(ca) == 1 and ca[0]["spec"]["isCA"] is True


# ---- agent ------------------------------------------------------------------------------------


def _under(path: str, folder: str) -> bool:
    return PurePosixPath(path).is_relative_to(PurePosixPath(folder))


def test_the_agent_sees_the_host_paths_it_hands_the_kubelet_at_the_same_paths() -> None:
    daemonset = _one(_install(), "DaemonSet", "gpupool-agent")
    pod = _pod(daemonset)
    container = _container("gpupool-agent", "agent")
    args = _parse(container["args"])
    host_paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    # Mounted where the host has them: the agent writes these paths and names them to the kubelet.
    same = [
        m["mountPath"]
        for m in container["volumeMounts"]
        if host_paths.get(m["name"]) == m["mountPath"] and not m.get("readOnly")
    ]
    written = {
        "--device-plugin-dir": str(args.device_plugin_dir),
        "--limits-dir": args.limits_dir,
        "ld.so.preload": PluginPaths().ld_so_preload_host,
    }
    for what, path in written.items():
        assert any(_under(path, m) for m in same), f"{what} {path} is not on a host path"


def test_the_agent_installs_the_limiter_where_the_device_plugin_mounts_it_from() -> None:
    pod = _pod(_one(_install(), "DaemonSet", "gpupool-agent"))
    limiter_host = PurePosixPath(_parse(_container("gpupool-agent", "agent")["args"]).limiter_path)
    [init] = pod["initContainers"]
    host_paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    [mount] = [
        m for m in init["volumeMounts"] if host_paths.get(m["name"]) == str(limiter_host.parent)
    ]
    script = " ".join(init["args"])
    destination = f"{mount['mountPath']}/{limiter_host.name}"
    assert re.search(rf"mv -f \S+ {re.escape(destination)}(\s|$)", script), script
    # ... copied from where the image has it.
    [image_path] = re.findall(r"^COPY --from=limiter \S+ (\S+)$", DOCKERFILE.read_text(), re.M)
    assert re.search(rf"cp {re.escape(image_path)} ", script), script
    assert PurePosixPath(image_path).name == limiter_host.name


def test_the_agent_knows_its_node_and_runs_only_on_gpu_nodes() -> None:
    pod = _pod(_one(_install(), "DaemonSet", "gpupool-agent"))
    container = _container("gpupool-agent", "agent")
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert "--node-name" not in " ".join(container["args"])  # the agent reads $NODE_NAME
    assert pod["nodeSelector"]
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"  # NVML needs the driver injected
    assert not container["securityContext"].get("privileged", False)


def test_the_webhook_takes_a_secret_for_the_certificates_names_as_it_is(tmp_path: Path) -> None:
    # What cert-manager writes for the Certificate (ca.crt, tls.crt, tls.key; its dnsNames), the
    # webhook started with the manifest's flags must use unchanged: the secret volume is read-only.
    issued = _docs(REPO / "deploy" / CERT_MANAGER_FILE)
    dns_names = tuple(_one(issued, "Certificate", "gpupool-webhook")["spec"]["dnsNames"])
    now = dt.datetime.now(dt.UTC)
    ca = Authority("test-ca", now)
    cert, key = ca.issue(tls_name(dns_names[0]), server=True, dns_names=dns_names)
    write_cert(tmp_path / "ca.crt", ca.cert)
    write_cert(tmp_path / "tls.crt", cert)
    write_key(tmp_path / "tls.key", key)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    args = _parse(_container("gpupool-webhook")["args"])
    config = webhook_cli._config(args)
    served = ensure_serving_cert(tmp_path, config.cert_hosts, now=now)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    assert (served.ca, served.cert, served.key) == tuple(tmp_path / n for n in SECRET_PATHS)
