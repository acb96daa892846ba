"""gpupool installed with its Helm chart on the dev cluster's real node: every component a pod
from the image, and a Deployment's 12Gi pod starting there with the limiter.

`up --real-node` on a bare cluster (no gpupool process; kube-scheduler pointed at the port the
chart's extender will listen on), the image (tools/image/build.sh) imported into the real node's
containerd, then `helm install gpupool deploy/helm/gpupool` with values for this machine:
- host network and a kubeconfig Secret per component: the apiserver listens on 127.0.0.1 only
  and no kube-proxy routes the `kubernetes` Service, so a pod reaches it only from the node's
  network. Each Secret holds a client certificate for the component's ServiceAccount user, so
  RBAC and the pod-integrity policy see the same identities as with a token.
- the webhook: the apiserver dials the webhook Service's endpoints (--enable-aggregator-routing),
  the pod on the node's network, as no kube-proxy routes its cluster IP.
- the agent: `gpupool dev-cluster agent`, whose fake card carries the uuid the project's fake
  CUDA driver reports (fake_gpus.py); its host folders under the test's own folder.
Needs root and cgroup v1 (skips otherwise, saying so), `make realnode`, and buildah/mmdebstrap.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from real_node_probe import (
    assert_probe_saw_its_limit,
    create_namespace,
    finished_output,
    probe_deployment,
    running_pod,
)

from gpupool.devcluster import ClusterSpec, DevCluster, DevClusterError
from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.binaries import Binaries
from gpupool.devcluster.nodes import parse_gpu_spec
from gpupool.devcluster.polling import poll_until
from gpupool.devcluster.ports import free_port
from gpupool.devcluster.rbac import service_account_groups, service_account_user
from gpupool.devcluster.realnode import host, snapshot
from gpupool.devcluster.realnode.fake_gpus import DEFAULT_GPUS, driver_uuid
from gpupool.devcluster.realnode.layout import CONTAINERD_NAMESPACE, NODE_NAME, Layout
from gpupool.devcluster.realnode.node import RealNodeSpec
from gpupool.devcluster.scheduler_config import ExtenderConfig
from gpupool.devcluster.spec import ClusterState
from gpupool.domain.units import GiB

_UNSUPPORTED = host.unsupported_reason()
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(_UNSUPPORTED is not None, reason=f"no real node here: {_UNSUPPORTED}"),
]
REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "gpupool"
NAMESPACE = "gpupool-system"
# The chart's default image name, as the kubelet resolves it (image.repository gpupool).
IMAGE = "docker.io/library/gpupool:0.1.0"
COMPONENTS = ("extender", "controller", "webhook", "agent")
GPUPOOL_API = "/apis/gpupool.io/v1alpha1"


@dataclass(frozen=True)
class HelmRealNode:
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
        """The kubelet's log and every chart pod's, for a failure's message."""
        kubelet = [p for p in self.cluster.logs() if p.name == "kubelet.log"]
        parts = [f"== kubelet\n{p.read_text()[-3000:]}" for p in kubelet]
        for pod in self.api.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]:
            name = pod["metadata"]["name"]
            done = subprocess.run(
                [str(self.binaries.kubectl), "--kubeconfig", self.state.kubeconfig,
                 "-n", NAMESPACE, "logs", name, "--tail=30"],
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            parts.append(f"== {name} {pod['status'].get('phase')}\n{done.stdout}{done.stderr}")
        return "\n".join(parts)


def _image_archive() -> Path:
    built = subprocess.run(
        [str(REPO / "tools" / "image" / "build.sh")], capture_output=True, text=True, timeout=3600
    )
    assert built.returncode == 0, f"tools/image/build.sh failed:\n{built.stderr[-3000:]}"
    return Path(built.stdout.strip().splitlines()[-1])


def _helm() -> str:
    built = subprocess.run(
        [str(REPO / "tools" / "helm" / "build.sh")], capture_output=True, text=True, timeout=1800
    )
    assert built.returncode == 0, f"tools/helm/build.sh failed:\n{built.stderr[-3000:]}"
    return built.stdout.strip().splitlines()[-1]


def _import_image(cluster: DevCluster, archive: Path) -> None:
    """`ctr images import` into the real node's containerd, named as the chart names it."""
    socket = Layout.under(cluster.state_dir).containerd_socket
    ctr = [str(host.host_tools().ctr), "--address", str(socket), "-n", CONTAINERD_NAMESPACE]

    def run(*args: str) -> str:
        done = subprocess.run([*ctr, *args], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"ctr {' '.join(args)}: {done.stderr}"
        return done.stdout

    # --index-name: the archive's index under the chart's name (its own `gpupool:0.1.0` is not a
    # full reference, so ctr would keep no name).
    run("images", "import", "--index-name", IMAGE, str(archive))
    names = run("images", "ls", "-q").split()
    assert IMAGE in names, names


def _values(root: Path, extender_port: int, webhook_port: int) -> dict[str, Any]:
    on_real = {"hostNetwork": True, "replicas": 1, "nodeSelector": {"type": "real"}}
    return {
        "image": {"pullPolicy": "Never"},
        "extender": {**on_real, "port": extender_port, "servicePort": extender_port,
                     "kubeconfigSecret": "gpupool-extender-kubeconfig"},
        # its metrics on a free port: the node's network is the host's, shared with others
        "controller": {**on_real, "kubeconfigSecret": "gpupool-controller-kubeconfig",
                       "extraArgs": [f"--metrics-address=127.0.0.1:{free_port()}"]},
        "webhook": {**on_real, "port": webhook_port,
                    "kubeconfigSecret": "gpupool-webhook-kubeconfig"},
        "agent": {
            "hostNetwork": True,
            "nodeSelector": {"nvidia.com/gpu.present": None, "type": "real"},
            "subcommand": ["dev-cluster", "agent"],
            "extraArgs": [f"--fake-gpus={DEFAULT_GPUS}", "--heartbeat=5"],
            "hostPaths": {"state": str(root / "agent-host" / "state"),
                          "limiter": str(root / "agent-host" / "lib")},
            "kubeconfigSecret": "gpupool-agent-kubeconfig",
        },
    }  # fmt: skip


def _kubeconfig_secrets(cluster: DevCluster, api: KubeApi) -> None:
    for component in COMPONENTS:
        user = service_account_user(f"gpupool-{component}")
        path = cluster.user_kubeconfig(user, service_account_groups())
        api.create(
            f"/api/v1/namespaces/{NAMESPACE}/secrets",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": f"gpupool-{component}-kubeconfig"},
                "stringData": {"kubeconfig": path.read_text()},
            },
        )


def _pods_ready(api: KubeApi) -> bool:
    pods = api.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
    ready = {
        pod["metadata"]["labels"].get("app.kubernetes.io/component")
        for pod in pods
        if any(c["type"] == "Ready" and c["status"] == "True"
               for c in pod["status"].get("conditions") or [])
    }  # fmt: skip
    return set(COMPONENTS) <= ready


def _gpus_reported(api: KubeApi) -> bool:
    node = api.get(f"/api/v1/nodes/{NODE_NAME}")
    gpunode = api.find(f"{GPUPOOL_API}/gpunodes/{NODE_NAME}")
    vgpus = (node["status"].get("allocatable") or {}).get("gpupool.io/vgpu", "0")
    return (
        int(vgpus) > 0 and gpunode is not None and bool(gpunode.get("status", {}).get("heartbeat"))
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HelmRealNode]:
    archive, helm = _image_archive(), _helm()
    root = tmp_path_factory.mktemp("helm-real-node")
    before = snapshot.capture(str(root))
    cluster = DevCluster(root)
    extender_port, webhook_port = free_port(), free_port()
    spec = ClusterSpec(
        extender=ExtenderConfig(url_prefix=f"http://127.0.0.1:{extender_port}/gpupool"),
        real_node=RealNodeSpec(gpus=parse_gpu_spec(DEFAULT_GPUS)),
        ready_timeout_s=120.0,
    )
    try:
        state = cluster.up(spec, die_with_parent=True)
    except DevClusterError as err:
        cluster.down()
        pytest.fail(f"up --real-node failed: {err}")
    try:
        api = cluster.api()
        stack = HelmRealNode(cluster, state, api, Binaries.locate(Path(state.bin_dir)), before)
        _import_image(cluster, archive)
        create_namespace(api, NAMESPACE)
        _kubeconfig_secrets(cluster, api)
        values = root / "values.yaml"
        values.write_text(yaml.safe_dump(_values(root, extender_port, webhook_port)))
        home = root / "helm-home"
        # its own HOME too: helm's Kubernetes client caches under $HOME/.kube
        env = {f"HELM_{k}_HOME": str(home / k.lower()) for k in ("CACHE", "CONFIG", "DATA")}
        env |= {"PATH": "/usr/bin:/bin", "HOME": str(home)}
        installed = subprocess.run(
            [helm, "--kubeconfig", state.kubeconfig, "install", "gpupool", str(CHART),
             "-n", NAMESPACE, "-f", str(values)],
            capture_output=True, text=True, timeout=300, env=env,
        )  # fmt: skip
        assert installed.returncode == 0, f"helm install: {installed.stderr}"
        assert poll_until(lambda: _pods_ready(api), timeout_s=240, interval_s=1), stack.logs()
        assert poll_until(lambda: _gpus_reported(api), timeout_s=60, interval_s=1), stack.logs()
        yield stack
    finally:
        cluster.down()


def test_every_component_is_a_pod_from_the_image_on_the_real_node(stack: HelmRealNode) -> None:
    pods = stack.api.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
    by_component = {p["metadata"]["labels"]["app.kubernetes.io/component"]: p for p in pods}
    assert set(by_component) == set(COMPONENTS)
    for component, pod in by_component.items():
        assert pod["spec"]["nodeName"] == NODE_NAME, component
        [status] = pod["status"]["containerStatuses"]
        assert status["image"] == IMAGE, (component, status)
        assert status["state"].get("running"), (component, status)
    # the agent's device plugin registered with the real kubelet, and it reports its GpuNode
    node = stack.api.get(f"/api/v1/nodes/{NODE_NAME}")
    assert node["status"]["allocatable"]["gpupool.io/vgpu"] == "10", node["status"]
    gpunode = stack.api.get(f"{GPUPOOL_API}/gpunodes/{NODE_NAME}")
    assert [d["uuid"] for d in gpunode["status"]["devices"]] == [driver_uuid(0)]
    # kube-scheduler's extender is the chart's pod (no gpupool process runs beside the cluster)
    names = {p.name for p in stack.cluster.running_state().processes}
    assert not {n for n in names if n.startswith("gpupool-")}, names
    assert stack.state.extender_url == (
        f"http://127.0.0.1:{by_component['extender']['spec']['containers'][0]['ports'][0]['containerPort']}/gpupool"
    )


def test_a_deployments_12gi_pod_runs_with_the_limiter(stack: HelmRealNode) -> None:
    api = stack.api
    ns = create_namespace(api, "helm-probe")
    api.create(f"/apis/apps/v1/namespaces/{ns}/deployments", probe_deployment("probe", "12Gi"))
    pod = poll_until(lambda: running_pod(api, ns, "probe"), timeout_s=180, interval_s=0.5)
    assert pod, f"the Deployment's pod never ran:\n{stack.logs()}"
    assert pod["spec"]["nodeName"] == NODE_NAME
    annotations = pod["metadata"]["annotations"]
    # the chart's webhook mutated it, its controller admitted it, its extender placed it
    assert pod["spec"]["containers"][0]["resources"]["limits"]["gpupool.io/vgpu"] == "1"
    assert "gpupool.io/admitted" in annotations, annotations
    assert "gpupool.io/allocation" in annotations, annotations
    name = pod["metadata"]["name"]
    out = poll_until(
        lambda: finished_output(stack.kubectl("-n", ns, "logs", name)), timeout_s=60, interval_s=0.5
    )
    assert out, f"no probe output:\n{stack.kubectl('-n', ns, 'logs', name)}"
    assert_probe_saw_its_limit(out, 12 * GiB)


def test_down_leaves_nothing_behind_on_the_host(stack: HelmRealNode) -> None:
    stopped = stack.cluster.down()
    assert {"kubelet", "containerd"} <= set(stopped)
    left = snapshot.left_behind(stack.before, snapshot.capture(str(stack.cluster.state_dir)))
    assert not left, f"left behind by the real node: {left}"
