"""A real node in the dev cluster: kubelet v1.34 on containerd and runc, gpupool's agent serving
its fake GPU through the real device-plugin API, and GPU pods from a Deployment running in real
containers with the limiter mounted and preloaded over the project's fake CUDA driver.

Needs root and cgroup v1 (the tests skip, saying so, only where the host cannot run a node at
all); the packages and images come from `make realnode` (tools/realnode/setup.sh), which
`make test` runs. The last test takes the cluster down and checks the host is as before.
"""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from real_node_probe import (
    assert_probe_saw_its_limit,
    create_namespace,
    finished_output,
    probe_deployment,
    running_pod,
)

from gpupool.devcluster import ClusterSpec, DevCluster, DevClusterError
from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.binaries import KUBERNETES_VERSION, Binaries
from gpupool.devcluster.nodes import node_specs, parse_gpu_spec
from gpupool.devcluster.polling import poll_until
from gpupool.devcluster.realnode import host, snapshot
from gpupool.devcluster.realnode.fake_gpus import DEFAULT_GPUS, driver_uuid
from gpupool.devcluster.realnode.layout import NODE_IP, NODE_NAME
from gpupool.devcluster.realnode.node import RealNodeSpec
from gpupool.devcluster.spec import ClusterState, GpupoolSpec
from gpupool.domain.units import GiB

_UNSUPPORTED = host.unsupported_reason()
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(_UNSUPPORTED is not None, reason=f"no real node here: {_UNSUPPORTED}"),
]
GPUPOOL_API = "/apis/gpupool.io/v1alpha1"


@dataclass(frozen=True)
class RealCluster:
    cluster: DevCluster
    state: ClusterState
    api: KubeApi
    binaries: Binaries
    before: snapshot.HostSnapshot

    def kubectl(self, *args: str) -> str:
        done = subprocess.run(
            [str(self.binaries.kubectl), "--kubeconfig", self.state.kubeconfig, *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done.stdout

    def logs(self) -> str:
        wanted = ("kubelet.log", "gpupool-agent.log", "containerd.log", "gpupool-extender.log")
        return "\n".join(
            f"== {log.name}\n" + "\n".join(log.read_text().splitlines()[-25:])
            for log in self.cluster.logs()
            if log.name in wanted
        )


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    root = tmp_path_factory.mktemp("real-node-cluster")
    before = snapshot.capture(str(root))
    cluster = DevCluster(root)
    spec = ClusterSpec(
        nodes=tuple(node_specs(2, parse_gpu_spec("8xA100-80GB"))),
        gpupool=GpupoolSpec(heartbeat_s=2.0, controller_resync_s=1.0),
        real_node=RealNodeSpec(gpus=parse_gpu_spec(DEFAULT_GPUS)),
        ready_timeout_s=120.0,
    )
    try:
        state = cluster.up(spec, die_with_parent=True)
    except DevClusterError as err:
        logs = "\n".join(f"== {p}\n{p.read_text()[-3000:]}" for p in cluster.logs())
        cluster.down()
        pytest.fail(f"up --real-node failed: {err}\n{logs}")
    try:
        yield RealCluster(
            cluster, state, cluster.api(), Binaries.locate(Path(state.bin_dir)), before
        )
    finally:
        cluster.down()


def _probe_output(real: RealCluster, ns: str, pod: str) -> str | None:
    return finished_output(real.kubectl("-n", ns, "logs", pod))


def test_the_real_node_is_ready_and_shows_the_agents_vgpus(real: RealCluster) -> None:
    node = real.api.get(f"/api/v1/nodes/{NODE_NAME}")
    conditions = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert conditions["Ready"] == "True", node["status"]["conditions"]
    assert not [t for t in node["spec"].get("taints") or [] if "not-ready" in t["key"]]
    # a real kubelet on containerd, not kwok
    info = node["status"]["nodeInfo"]
    assert info["kubeletVersion"] == KUBERNETES_VERSION
    assert info["containerRuntimeVersion"].startswith("containerd://")
    assert "kwok.x-k8s.io/node" not in (node["metadata"].get("annotations") or {})
    assert {"type": "InternalIP", "address": NODE_IP} in node["status"]["addresses"]
    # the agent's device plugin, registered with this kubelet: one card, ten vgpus
    assert node["status"]["allocatable"]["gpupool.io/vgpu"] == "10", node["status"]
    gpunode = real.api.get(f"{GPUPOOL_API}/gpunodes/{NODE_NAME}")
    assert [d["uuid"] for d in gpunode["status"]["devices"]] == [driver_uuid(0)]
    # the kwok nodes are still kwok's, Ready and untainted
    for name in real.state.nodes:
        kwok = real.api.get(f"/api/v1/nodes/{name}")
        assert kwok["status"]["nodeInfo"]["kubeletVersion"] == "fake"
        assert not kwok["spec"].get("taints"), kwok["spec"]


def test_the_kubelet_api_refuses_anonymous_callers(real: RealCluster) -> None:
    node = real.api.get(f"/api/v1/nodes/{NODE_NAME}")
    port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
    context = ssl.create_default_context(cafile=str(real.cluster.pki_dir / "ca.crt"))
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        opener.open(f"https://{NODE_IP}:{port}/pods", timeout=10)
    assert refused.value.code == 401


def test_a_deployments_12gi_pod_runs_on_the_real_node_and_sees_12gi(real: RealCluster) -> None:
    api = real.api
    ns = create_namespace(api, "probe-12")
    api.create(f"/apis/apps/v1/namespaces/{ns}/deployments", probe_deployment("probe", "12Gi"))
    pod = poll_until(lambda: running_pod(api, ns, "probe"), timeout_s=120, interval_s=0.5)
    assert pod, f"the Deployment's pod never ran:\n{real.logs()}"
    assert pod["spec"]["nodeName"] == NODE_NAME
    # the extender placed it (its allocation), the agent's Allocate ran (the lease has devices)
    assert "gpupool.io/allocation" in pod["metadata"]["annotations"]
    name = pod["metadata"]["name"]
    out = poll_until(lambda: _probe_output(real, ns, name), timeout_s=60, interval_s=0.5)
    assert out, f"no probe output:\n{real.kubectl('-n', ns, 'logs', name)}"
    assert_probe_saw_its_limit(out, 12 * GiB)


def test_two_pods_on_the_one_card_each_see_their_own_limit(real: RealCluster) -> None:
    api = real.api
    ns = create_namespace(api, "probe-two")
    sizes = {"small": 8, "large": 20}
    for app, gib in sizes.items():
        api.create(f"/apis/apps/v1/namespaces/{ns}/deployments", probe_deployment(app, f"{gib}Gi"))
    for app, gib in sizes.items():
        pod = poll_until(lambda a=app: running_pod(api, ns, a), timeout_s=120, interval_s=0.5)
        assert pod, f"{app} never ran:\n{real.logs()}"
        name = pod["metadata"]["name"]
        out = poll_until(lambda n=name: _probe_output(real, ns, n), timeout_s=60, interval_s=0.5)
        assert out, f"no probe output from {name}"
        assert f"cuda: device 0 {driver_uuid(0)} total {gib * GiB} " in out, out
        assert f"nvml: device 0 {driver_uuid(0)} total {gib * GiB} used 0" in out, out
        assert "(past the total): CUDA_ERROR_OUT_OF_MEMORY" in out, out


def _events(api: KubeApi, ns: str, pod: str) -> list[dict[str, Any]]:
    selector = f"involvedObject.name%3D{pod}"
    return list(api.get(f"/api/v1/namespaces/{ns}/events?fieldSelector={selector}")["items"])


def test_a_pod_whose_lease_is_gone_is_refused_by_allocate_and_placed_again(
    real: RealCluster,
) -> None:
    """The extender binds the pod and writes its lease; the lease is deleted before the kubelet
    gets to the pod (the kubelet is paused for that moment); Allocate must refuse with a message
    that reaches the pod's events, and the Deployment's next pod must run."""
    api = real.api
    ns = create_namespace(api, "probe-gone")
    [kubelet] = [p for p in real.cluster.running_state().processes if p.name == "kubelet"]
    os.kill(kubelet.pid, signal.SIGSTOP)
    try:
        api.create(f"/apis/apps/v1/namespaces/{ns}/deployments", probe_deployment("gone", "4Gi"))

        def bound() -> dict[str, Any] | None:
            pods = api.get(f"/api/v1/namespaces/{ns}/pods?labelSelector=app%3Dgone")["items"]
            ready = [p for p in pods if "gpupool.io/lease" in p["metadata"].get("annotations", {})]
            return ready[0] if ready and ready[0]["spec"].get("nodeName") else None

        first = poll_until(bound, timeout_s=60, interval_s=0.2)
        assert first, f"the pod was never bound:\n{real.logs()}"
        lease_ns, lease_name = first["metadata"]["annotations"]["gpupool.io/lease"].split("/")
        lease = f"{GPUPOOL_API}/namespaces/{lease_ns}/gpuleases/{lease_name}"
        api.delete(lease)
        assert poll_until(lambda: api.find(lease) is None, timeout_s=30), "the lease stayed"
    finally:
        os.kill(kubelet.pid, signal.SIGCONT)
    name = first["metadata"]["name"]

    def refusal() -> str | None:
        for event in _events(api, ns, name):
            if "gpupool lease" in event.get("message", ""):
                return str(event["message"])
        return None

    message = poll_until(refusal, timeout_s=60, interval_s=0.5)
    assert message, f"no refusal in the events: {_events(api, ns, name)}\n{real.logs()}"
    assert f"no gpupool lease on node {NODE_NAME}" in message, message

    def replaced() -> dict[str, Any] | None:
        pod = running_pod(api, ns, "gone")
        return pod if pod is not None and pod["metadata"]["name"] != name else None

    again = poll_until(replaced, timeout_s=120, interval_s=0.5)
    assert again, f"no pod ran after the refusal:\n{real.logs()}"
    assert again["spec"]["nodeName"] == NODE_NAME
    refused = api.find(f"/api/v1/namespaces/{ns}/pods/{name}")
    assert refused is None or refused["status"]["phase"] == "Failed", refused["status"]


def test_down_leaves_nothing_behind_on_the_host(real: RealCluster) -> None:
    stopped = real.cluster.down()
    assert {"kubelet", "containerd", "gpupool-agent"} <= set(stopped)
    left = snapshot.left_behind(real.before, snapshot.capture(str(real.cluster.state_dir)))
    assert not left, f"left behind by the real node: {left}"
