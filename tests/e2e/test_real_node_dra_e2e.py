"""gpupool's DRA driver called by a real kubelet (issue 26's "Done means", on the real node).

The dev cluster's real node (kubelet v1.36 on containerd v2, CDI on) with one fake 80 GiB card,
its agent run with `--dra`: the agent registers `gpu.gpupool.io` with the kubelet's plugin
watcher, publishes the node's ResourceSlice, and writes each prepared claim's CDI spec where
containerd reads them. In a tenant namespace, Deployments whose pods take a claim from a
ResourceClaimTemplate (class gpu.gpupool.io, `capacity.requests.memory`) are gated by the
webhook, admitted against the tenant's GpuQuota, their claims allocated by gpupool's controller,
and started by the kubelet, which calls the agent's NodePrepareResources over its socket and
hands containerd the CDI device IDs it answers; containerd applies the spec (the limiter, its
preload, the limits file, NVIDIA_VISIBLE_DEVICES), the GPU probe inside sees its slice, not the
card, and the container's status shows the card Healthy from the agent's health stream. Then:
two claims share the card, each seeing its own limit; a third waits at the gate with its queue
position; the agent restarts with two claims prepared and loses nothing; deleting a pod
unprepares its claim (the restarted agent removes its files), ends its lease, metered, and the
waiting pod takes its place.

The tests run in order on one cluster and build on each other (a scenario in steps). Marked like
the other real-node tests: they skip, saying why, where no real node can run.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from support.real_node import (
    GPUPOOL_API,
    MARKS,
    RealNode,
    assert_probe_saw_its_limit,
    check_down_leaves_nothing_behind,
    short_root,
    up,
)

from gpupool.adapters.wire import names
from gpupool.adapters.wire.names import DRA_DRIVER
from gpupool.devcluster import ClusterSpec, processes
from gpupool.devcluster.nodes import node_specs, parse_gpu_spec
from gpupool.devcluster.polling import poll_until
from gpupool.devcluster.realnode import host
from gpupool.devcluster.realnode.fake_gpus import driver_uuid
from gpupool.devcluster.realnode.layout import CONTAINERD_NAMESPACE, NODE_NAME, PROBE_IMAGE, Layout
from gpupool.devcluster.realnode.node import NATIVE_BUILD, RealNodeSpec
from gpupool.devcluster.spec import GpupoolSpec
from gpupool.domain.units import GiB
from gpupool.node.device_plugin.decide import PluginPaths
from gpupool.node.dra import cdi
from gpupool.node.dra.slices import slice_name

pytestmark = MARKS

RESOURCE = "/apis/resource.k8s.io/v1"
CARD = driver_uuid(0)  # the node's one card: every claim below shares it
QUOTA = "32Gi"  # the tenant's nominal quota: 12Gi and 20Gi fit, a third 12Gi waits
REGISTERED = f"the kubelet registered DRA driver {DRA_DRIVER}"

# What the chart grants the controller with dra.enabled (templates/rbac/controller.yaml), plus
# the slices it lists to find the nodes that publish gpupool's (as test_dra_alloc_e2e grants).
CLAIM_RULES = [
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/status"],
     "verbs": ["patch"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/binding"],
     "verbs": ["patch"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": ["list"]},
]  # fmt: skip


@dataclass
class Scenario:
    """The cluster and what the steps made: the tenant, and each Deployment's running pod."""

    real: RealNode
    tenant: str = ""
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def layout(self) -> Layout:
        return Layout.under(self.real.cluster.state_dir)

    def agent_log(self) -> str:
        [log] = [p for p in self.real.cluster.logs() if p.name == "gpupool-agent.log"]
        return log.read_text()


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    spec = ClusterSpec(
        nodes=tuple(node_specs(1, parse_gpu_spec("8xA100-80GB"))),
        gpupool=GpupoolSpec(heartbeat_s=2.0, controller_resync_s=1.0),
        real_node=RealNodeSpec(gpus=parse_gpu_spec("1xA100-80GB"), dra=True),
        ready_timeout_s=120.0,
    )
    with short_root(tmp_path_factory, "real-dra") as root:
        real = up(root, spec)
        try:
            yield Scenario(real)
        finally:
            real.cluster.down()


# ---- what the steps use -----------------------------------------------------------------------


def _grant_claims(api: Any) -> None:
    name = "gpupool-controller-dra"
    api.create_or_replace({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name}, "rules": CLAIM_RULES})  # fmt: skip
    api.create_or_replace({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": "gpupool-controller",
                      "namespace": "gpupool-system"}]})  # fmt: skip


def _template(namespace: str, name: str, memory: str) -> dict[str, Any]:
    request = {"deviceClassName": DRA_DRIVER, "capacity": {"requests": {"memory": memory}}}
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}},
    }  # fmt: skip


def _deployment(app: str, template: str) -> dict[str, Any]:
    """What a user writes: the GPU probe asking for its GPU with a claim from `template`."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": app},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {
                    "nodeSelector": {"type": "real"},
                    "terminationGracePeriodSeconds": 1,
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
                    "containers": [
                        {
                            "name": "probe",
                            "image": PROBE_IMAGE,
                            "imagePullPolicy": "Never",
                            "resources": {"claims": [{"name": "gpu"}]},
                        }
                    ],
                },
            },
        },
    }


def _pods(s: Scenario, app: str) -> list[dict[str, Any]]:
    path = f"/api/v1/namespaces/{s.tenant}/pods?labelSelector=app%3D{app}"
    return list(s.real.api.get(path)["items"])


def _running(s: Scenario, app: str) -> dict[str, Any] | None:
    for pod in _pods(s, app):
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        if any((c.get("state") or {}).get("running") for c in statuses):
            return pod
    return None


def _claim(s: Scenario, pod: dict[str, Any]) -> dict[str, Any]:
    [status] = pod["status"]["resourceClaimStatuses"]
    path = f"{RESOURCE}/namespaces/{s.tenant}/resourceclaims/{status['resourceClaimName']}"
    return dict(s.real.api.get(path))


def _lease(s: Scenario, pod: dict[str, Any]) -> dict[str, Any]:
    # the claim allocator names a claim pod's lease after the pod's uid
    path = f"{GPUPOOL_API}/namespaces/{s.tenant}/gpuleases/{pod['metadata']['uid']}"
    return dict(s.real.api.get(path))


def _container_spec(s: Scenario, pod: dict[str, Any]) -> dict[str, Any]:
    """The OCI spec containerd gave the probe's container (the CDI edits applied)."""
    [status] = pod["status"]["containerStatuses"]
    container = str(status["containerID"]).removeprefix("containerd://")
    ctr = [str(host.host_tools().ctr), "--address", str(s.layout.containerd_socket)]
    done = subprocess.run(
        [*ctr, "-n", CONTAINERD_NAMESPACE, "containers", "info", container],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout)["Spec"])


def _health_shown(s: Scenario, name: str) -> list[dict[str, Any]] | None:
    """The probe container's allocatedResourcesStatus once the kubelet shows a health."""
    pod = s.real.api.get(f"/api/v1/namespaces/{s.tenant}/pods/{name}")
    [status] = pod["status"].get("containerStatuses") or [{}]
    shown = status.get("allocatedResourcesStatus")
    healths = [r.get("health") for entry in shown or [] for r in entry.get("resources") or []]
    return list(shown) if healths and all(healths) else None


def _files_of(s: Scenario, claim_uid: str) -> dict[str, Path]:
    """The claim's files the agent writes at NodePrepareResources: its CDI spec (where
    containerd reads), its checkpoint, and the limits file the spec mounts."""
    spec = s.layout.cdi_spec_dir / cdi.spec_file_name(claim_uid)
    files = {"cdi": spec, "checkpoint": s.layout.dra_state_dir / f"{claim_uid}.json"}
    if spec.is_file():
        mounts = cdi.read_spec(spec.read_text(), str(spec)).mounts
        [limits] = [m for m in mounts if m.container_path == "/etc/gpupool/limits"]
        files["limits"] = Path(limits.host_path)
    return files


def _start(s: Scenario, app: str, template: str) -> None:
    s.real.api.create(
        f"/apis/apps/v1/namespaces/{s.tenant}/deployments", _deployment(app, template)
    )


def _runs_and_sees(s: Scenario, app: str, gib: int) -> dict[str, Any]:
    """Waits for `app`'s pod to run on the real node and checks what its probe saw: `gib` GiB
    of the node's card, through the limiter the claim's CDI spec put in. Returns the pod."""
    pod = poll_until(lambda: _running(s, app), timeout_s=180, interval_s=0.5)
    assert pod, f"{app}'s pod never ran: {_pods(s, app)}\n{s.real.logs()}"
    assert pod["spec"]["nodeName"] == NODE_NAME
    name = pod["metadata"]["name"]
    out = poll_until(lambda: s.real.probe_output(s.tenant, name), timeout_s=60, interval_s=0.5)
    assert out, f"no probe output:\n{s.real.kubectl('-n', s.tenant, 'logs', name)}"
    assert_probe_saw_its_limit(out, gib * GiB, CARD)
    s.pods[app] = pod
    return pod


# ---- the steps --------------------------------------------------------------------------------


def test_the_kubelet_registers_the_driver_and_the_node_publishes_its_card(
    scenario: Scenario,
) -> None:
    api = scenario.real.api
    assert api.find(f"{RESOURCE}/deviceclasses/{DRA_DRIVER}") is not None
    published = api.get(f"{RESOURCE}/resourceslices/{slice_name(NODE_NAME)}")
    assert published["spec"]["nodeName"] == NODE_NAME
    [device] = published["spec"]["devices"]
    assert device["name"] == "gpu-0"
    assert device["attributes"]["uuid"] == {"string": CARD}
    # kept by the API server: consumable capacity is on (beta and on by default in 1.36)
    assert device.get("allowMultipleAllocations") is True, device
    # the kubelet's plugin watcher found the registration socket under its --root-dir, called
    # GetInfo and told the agent it registered the driver
    registered = poll_until(lambda: REGISTERED in scenario.agent_log(), timeout_s=60)
    assert registered, scenario.real.logs()


def test_a_deployments_12gi_claim_pod_starts_under_the_limiter_and_sees_12gi(
    scenario: Scenario,
) -> None:
    s = scenario
    api = s.real.api
    _grant_claims(api)
    s.tenant = f"dra-{secrets.token_hex(3)}"
    api.create(f"{GPUPOOL_API}/gpuquotas", {
        "apiVersion": "gpupool.io/v1alpha1", "kind": "GpuQuota",
        "metadata": {"name": s.tenant}, "spec": {"nominal": QUOTA}})  # fmt: skip
    api.create("/api/v1/namespaces", {
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": s.tenant, "labels": {names.LABEL_TENANT: s.tenant}}})  # fmt: skip
    for name, memory in (("t12", "12Gi"), ("t20", "20Gi")):
        api.create(f"{RESOURCE}/namespaces/{s.tenant}/resourceclaimtemplates",
                   _template(s.tenant, name, memory))  # fmt: skip

    _start(s, "a", "t12")
    pod = _runs_and_sees(s, "a", 12)
    # gpupool's: gated by the webhook with its ask, admitted, placed and leased by gpupool
    annotations = pod["metadata"]["annotations"]
    assert json.loads(annotations[names.ANN_CLAIM])["memory"] == 12 * GiB
    assert names.ANN_ADMITTED in annotations and "gpupool.io/allocation" in annotations
    lease = _lease(s, pod)
    [card] = lease["spec"]["devices"]
    assert (lease["spec"]["node"], card["uuid"], card["sizeBytes"]) == (NODE_NAME, CARD, 12 * GiB)
    claim = _claim(s, pod)
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"], result["device"]) == (DRA_DRIVER, NODE_NAME, "gpu-0")
    assert result["consumedCapacity"]["memory"] in (str(12 * GiB), "12Gi")
    # the kubelet asked the agent to prepare it: the claim's CDI spec is where containerd reads,
    # with its checkpoint and limits file; containerd applied the spec's edits to the container
    files = _files_of(s, claim["metadata"]["uid"])
    assert all(path.is_file() for path in files.values()), files
    assert files["limits"].read_text() == f"{CARD} {12 * GiB}\n"
    oci = _container_spec(s, pod)
    env = dict(str(e).split("=", 1) for e in oci["process"]["env"])
    mounts = {m["destination"]: m for m in oci["mounts"]}
    assert mounts["/etc/gpupool/limits"]["source"] == str(files["limits"])
    assert "ro" in mounts["/etc/gpupool/limits"]["options"]
    # the limiter, mounted from the agent's --limiter-path and preloaded
    limiter = PluginPaths().limiter_container
    assert mounts[limiter]["source"] == str(NATIVE_BUILD / "libgpupool.so")
    assert env["LD_PRELOAD"] == limiter
    assert env["NVIDIA_VISIBLE_DEVICES"] == CARD
    assert env["GPUPOOL_LEASE"] == f"{s.tenant}/{claim['metadata']['name']}"
    assert env["GPUPOOL_DRA_GPU_0"] == CARD  # the device's own edit: the kubelet named it
    # the card's health, streamed by the agent (DRAResourceHealth), in the container's status
    device_id = f"gpu.gpupool.io/claim={claim['metadata']['uid']}-gpu-0"
    health = poll_until(lambda: _health_shown(s, pod["metadata"]["name"]), timeout_s=60)
    wanted = [{"name": "claim:gpu", "resources": [{"resourceID": device_id, "health": "Healthy"}]}]
    assert health == wanted, health


def test_two_claims_share_the_card_each_seeing_its_own_limit(scenario: Scenario) -> None:
    s = scenario
    _start(s, "b", "t20")
    b = _runs_and_sees(s, "b", 20)
    a = s.pods["a"]
    # one card, two claims: each its own share of it, its own spec and limits file
    claims = [_claim(s, pod) for pod in (a, b)]
    results = [c["status"]["allocation"]["devices"]["results"][0] for c in claims]
    assert {r["device"] for r in results} == {"gpu-0"}
    assert len({r.get("shareID") for r in results}) == 2, results
    limits = [_files_of(s, c["metadata"]["uid"])["limits"].read_text() for c in claims]
    assert limits == [f"{CARD} {12 * GiB}\n", f"{CARD} {20 * GiB}\n"]
    # a's probe, still running, saw its 12 GiB and not b's 20 (checked again from its log)
    out = s.real.probe_output(s.tenant, a["metadata"]["name"])
    assert out is not None
    assert_probe_saw_its_limit(out, 12 * GiB, CARD)


def test_a_third_claim_pod_over_the_quota_waits_at_the_gate_with_its_position(
    scenario: Scenario,
) -> None:
    s = scenario
    _start(s, "c", "t12")

    def queued() -> str | None:
        pods = _pods(s, "c")
        note = (pods[0]["metadata"].get("annotations") or {}).get(names.ANN_QUEUE) if pods else None
        return note if note and "position 1 of 1" in note else None

    note = poll_until(queued, timeout_s=90, interval_s=0.5)
    assert note, f"c never queued: {_pods(s, 'c')}\n{s.real.logs()}"
    [pod] = _pods(s, "c")
    assert {"name": names.QUOTA_GATE} in pod["spec"]["schedulingGates"]
    assert not pod["spec"].get("nodeName")


def test_the_agent_killed_and_restarted_with_claims_prepared_loses_nothing(
    scenario: Scenario,
) -> None:
    """A crash, not a clean stop: SIGKILL leaves the sockets behind and runs no cleanup; the
    new agent takes the sockets over, the kubelet registers it again, and the checkpoints are
    what it knows (the next step unprepares and prepares through it)."""
    s = scenario
    before = s.agent_log().count(REGISTERED)
    claims = [_claim(s, s.pods[app]) for app in ("a", "b")]
    files = {c["metadata"]["uid"]: _files_of(s, c["metadata"]["uid"]) for c in claims}
    checkpoints = {uid: f["checkpoint"].read_text() for uid, f in files.items()}

    [agent] = [p for p in s.real.cluster.running_state().processes if p.name == "gpupool-agent"]
    os.killpg(agent.pid, signal.SIGKILL)
    assert poll_until(lambda: not processes.is_running(agent), timeout_s=30)
    s.real.cluster.restart("gpupool-agent")

    registered = poll_until(lambda: s.agent_log().count(REGISTERED) > before, timeout_s=60)
    assert registered, f"the restarted agent was not registered again:\n{s.real.logs()}"
    # the prepared claims' files and checkpoints are as they were
    for uid, found in files.items():
        assert all(path.is_file() for path in found.values()), found
        assert found["checkpoint"].read_text() == checkpoints[uid]
    for app in ("a", "b"):
        assert _running(s, app) is not None, f"{app} stopped running:\n{s.real.logs()}"


def test_deleting_a_pod_unprepares_its_claim_ends_its_lease_metered_and_frees_room(
    scenario: Scenario,
) -> None:
    """After the restart: the kubelet's NodeUnprepareResources reaches the new agent, which
    removes the files the old one wrote (from its checkpoint); the lease is Released with its
    GiB-hours; the claim is gone; the waiting pod c is admitted into the 12Gi that came back
    and prepared by the restarted agent beside b's 20Gi."""
    s = scenario
    api = s.real.api
    a = s.pods["a"]
    claim = _claim(s, a)
    uid = claim["metadata"]["uid"]
    files = _files_of(s, uid)
    api.delete(f"/apis/apps/v1/namespaces/{s.tenant}/deployments/a")

    claim_path = f"{RESOURCE}/namespaces/{s.tenant}/resourceclaims/{claim['metadata']['name']}"
    gone = poll_until(lambda: api.find(claim_path) is None, timeout_s=120, interval_s=0.5)
    assert gone, f"a's claim stayed: {api.find(claim_path)}\n{s.real.logs()}"
    unprepared = poll_until(lambda: not any(p.exists() for p in files.values()), timeout_s=60)
    assert unprepared, f"a's files stayed: {files}\n{s.real.logs()}"
    assert f"unprepared claim {s.tenant}/{claim['metadata']['name']}" in s.agent_log()

    lease_path = f"{GPUPOOL_API}/namespaces/{s.tenant}/gpuleases/{a['metadata']['uid']}"

    def released() -> dict[str, Any] | None:
        status = (api.get(lease_path).get("status") or {}) if api.find(lease_path) else {}
        return status if status.get("phase") == "Released" else None

    status = poll_until(released, timeout_s=90, interval_s=0.5)
    assert status, f"a's lease was not Released: {api.find(lease_path)}\n{s.real.logs()}"
    assert float(status.get("gibHours", 0)) > 0, status

    c = _runs_and_sees(s, "c", 12)
    files_c = _files_of(s, _claim(s, c)["metadata"]["uid"])
    assert files_c["limits"].read_text() == f"{CARD} {12 * GiB}\n"
    assert _running(s, "b") is not None


def test_down_leaves_nothing_behind_on_the_host(scenario: Scenario) -> None:
    check_down_leaves_nothing_behind(scenario.real, "gpupool-agent")
