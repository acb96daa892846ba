"""gpupool installed with its Helm chart on the dev cluster's real node: every component a pod
from the image, kube-scheduler calling the chart's extender over HTTPS with the chart's client
pair, and Deployments' pods starting there with the limiter.

`up --real-node` on a bare cluster (no gpupool process; kube-scheduler pointed at the port the
chart's extender will listen on), the image (tools/image/build.sh) imported into the real node's
containerd, then `helm install gpupool deploy/helm/gpupool` with values for this machine:
- host network and a kubeconfig Secret per component: the apiserver listens on 127.0.0.1 only
  and no kube-proxy routes the `kubernetes` Service, so a pod reaches it only from the node's
  network. Each Secret holds a client certificate for the component's ServiceAccount user, so
  RBAC and the pod-integrity policy see the same identities as with a token.
- the extender: TLS as the chart makes it by default (extender.tls); scheduler.extenderURL the
  node-network URL kube-scheduler dials, which the chart adds to the serving certificate. After
  the install the chart's secret gpupool-extender-scheduler-client is copied into a folder, as
  docs/install.md tells an operator, kube-scheduler's configuration gets the chart's tlsConfig
  naming it, and kube-scheduler restarts.
- the webhook: the apiserver dials the webhook Service's endpoints (--enable-aggregator-routing),
  the pod on the node's network, as no kube-proxy routes its cluster IP.
- the agent: `gpupool dev-cluster agent`, whose fake card carries the uuid the project's fake
  CUDA driver reports (fake_gpus.py); its host folders under the test's own folder.
The pod checks are tests/support/real_node.py's, the same as test_real_node_e2e.py's with
gpupool as host processes. Needs root and cgroup v1 (skips otherwise, saying so), `make
realnode`, and buildah/mmdebstrap. Run it under `flock /tmp/gpupool-realnode.lock`.
"""

from __future__ import annotations

import base64
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.real_node import (
    CHART_NAMESPACE,
    GPUPOOL_API,
    MARKS,
    RealNode,
    check_a_deployments_pod_runs_with_its_limit,
    check_a_pod_whose_lease_is_gone_is_refused_and_replaced,
    check_down_leaves_nothing_behind,
    check_pods_see_their_own_limits,
    create_namespace,
    short_root,
    up,
)

from gpupool.devcluster import ClusterSpec, DevCluster
from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.nodes import parse_gpu_spec
from gpupool.devcluster.polling import poll_until
from gpupool.devcluster.ports import free_port
from gpupool.devcluster.rbac import service_account_groups, service_account_user
from gpupool.devcluster.realnode import host
from gpupool.devcluster.realnode.fake_gpus import driver_uuid
from gpupool.devcluster.realnode.layout import CONTAINERD_NAMESPACE, NODE_NAME, Layout
from gpupool.devcluster.realnode.node import RealNodeSpec
from gpupool.devcluster.scheduler_config import ExtenderConfig, write_scheduler_configuration

pytestmark = MARKS
REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "gpupool"
NAMESPACE = CHART_NAMESPACE
# The chart's default image name, as the kubelet resolves it (image.repository gpupool).
IMAGE = "docker.io/library/gpupool:0.1.0"
COMPONENTS = ("extender", "controller", "webhook", "agent", "web")
# One card (the default real node has two): so that two pods are sure to share it, whatever the
# placement policy prefers; test_real_node_e2e.py runs pods on two cards.
HELM_GPUS = "1xA100-80GB"
# The chart's secret with kube-scheduler's client pair for the extender (ca.crt, tls.crt, tls.key).
SCHEDULER_CLIENT_SECRET = "gpupool-extender-scheduler-client"


@dataclass(frozen=True)
class HelmRealNode:
    """The real node with the chart installed: `extender_url` is what kube-scheduler calls (the
    extender pod on the node's network, over HTTPS), `scheduler_tls` the folder holding the
    chart's client pair as an operator copies it for kube-scheduler."""

    real: RealNode
    extender_url: str
    scheduler_tls: Path


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
        "web": {**on_real, "port": free_port(), "kubeconfigSecret": "gpupool-web-kubeconfig"},
        "agent": {
            "hostNetwork": True,
            "nodeSelector": {"nvidia.com/gpu.present": None, "type": "real"},
            "subcommand": ["dev-cluster", "agent"],
            "extraArgs": [f"--fake-gpus={HELM_GPUS}", "--heartbeat=5"],
            "hostPaths": {"state": str(root / "agent-host" / "state"),
                          "limiter": str(root / "agent-host" / "lib")},
            "kubeconfigSecret": "gpupool-agent-kubeconfig",
        },
        # what kube-scheduler dials: the extender pod on the node's network (the chart puts
        # this host into the extender's serving certificate)
        "scheduler": {"extenderURL": _extender_url(extender_port)},
    }  # fmt: skip


def _extender_url(port: int) -> str:
    return f"https://127.0.0.1:{port}/gpupool"


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
    return int(vgpus) > 0 and gpunode is not None and "devices" in (gpunode.get("status") or {})


def _copy_scheduler_client_pair(api: KubeApi, folder: Path) -> Path:
    """What docs/install.md tells an operator to do on each control-plane node: the three keys
    of the chart's secret as files of one folder."""
    secret = api.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/{SCHEDULER_CLIENT_SECRET}")
    folder.mkdir(mode=0o700)
    for key, data in secret["data"].items():
        (folder / key).write_bytes(base64.b64decode(data))
    return folder


def _point_kube_scheduler_at_the_chart(real: RealNode, url: str, tls: Path) -> None:
    """kube-scheduler's configuration gets the chart's tlsConfig (the client pair, the CA) and
    the scheduler restarts with it, as a kubelet restarts the static pod on a changed manifest."""
    config = ExtenderConfig(
        url_prefix=url,
        ca_file=tls / "ca.crt",
        cert_file=tls / "tls.crt",
        key_file=tls / "tls.key",
    )
    cluster = real.cluster
    write_scheduler_configuration(
        cluster.scheduler_config_path, cluster.scheduler_kubeconfig_path, config
    )
    cluster.restart("kube-scheduler")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HelmRealNode]:
    archive, helm = _image_archive(), _helm()
    with short_root(tmp_path_factory, "helm-real-node") as root:
        extender_port, webhook_port = free_port(), free_port()
        url = _extender_url(extender_port)
        spec = ClusterSpec(
            # no client pair yet: the chart makes it; kube-scheduler is pointed at it after install
            extender=ExtenderConfig(url_prefix=url),
            real_node=RealNodeSpec(gpus=parse_gpu_spec(HELM_GPUS)),
            ready_timeout_s=120.0,
        )
        real = up(root, spec)
        try:
            api = real.api
            _import_image(real.cluster, archive)
            create_namespace(api, NAMESPACE)
            _kubeconfig_secrets(real.cluster, api)
            values = root / "values.yaml"
            values.write_text(yaml.safe_dump(_values(root, extender_port, webhook_port)))
            home = root / "helm-home"
            # its own HOME too: helm's Kubernetes client caches under $HOME/.kube
            env = {f"HELM_{k}_HOME": str(home / k.lower()) for k in ("CACHE", "CONFIG", "DATA")}
            env |= {"PATH": "/usr/bin:/bin", "HOME": str(home)}
            installed = subprocess.run(
                [helm, "--kubeconfig", real.state.kubeconfig, "install", "gpupool", str(CHART),
                 "-n", NAMESPACE, "-f", str(values)],
                capture_output=True, text=True, timeout=300, env=env,
            )  # fmt: skip
            assert installed.returncode == 0, f"helm install: {installed.stderr}"
            assert poll_until(lambda: _pods_ready(api), timeout_s=240, interval_s=1), real.logs()
            assert poll_until(lambda: _gpus_reported(api), timeout_s=60, interval_s=1), real.logs()
            tls = _copy_scheduler_client_pair(api, root / "scheduler-tls")
            _point_kube_scheduler_at_the_chart(real, url, tls)
            yield HelmRealNode(real, url, tls)
        finally:
            real.cluster.down()


def _opener(context: ssl.SSLContext) -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )


def _bind_status(stack: HelmRealNode, context: ssl.SSLContext) -> int:
    """The HTTP status of a /bind to the chart's extender (a body it would refuse anyway)."""
    request = urllib.request.Request(
        f"{stack.extender_url}/bind",
        data=b'{"PodName": "p", "PodNamespace": "default", "PodUID": "u", "Node": "n"}',
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with _opener(context).open(request, timeout=10) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as err:
        return err.code


def _extender_requests(stack: HelmRealNode, verb: str, outcome: str) -> float:
    """gpupool_extender_requests_total{verb, outcome} from the extender pod's /metrics (which
    needs no client certificate), read over HTTPS checked against the chart's CA."""
    context = ssl.create_default_context(cafile=str(stack.scheduler_tls / "ca.crt"))
    base = stack.extender_url.removesuffix("/gpupool")
    with _opener(context).open(f"{base}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    wanted = f'gpupool_extender_requests_total{{outcome="{outcome}",verb="{verb}"}} '
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(wanted))


def test_every_component_is_a_pod_from_the_image_on_the_real_node(stack: HelmRealNode) -> None:
    real = stack.real
    pods = real.api.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
    by_component = {p["metadata"]["labels"]["app.kubernetes.io/component"]: p for p in pods}
    assert set(by_component) == set(COMPONENTS)
    for component, pod in by_component.items():
        assert pod["spec"]["nodeName"] == NODE_NAME, component
        [status] = pod["status"]["containerStatuses"]
        assert status["image"] == IMAGE, (component, status)
        assert status["state"].get("running"), (component, status)
    # the agent's device plugin registered with the real kubelet, and it reports its GpuNode
    node = real.api.get(f"/api/v1/nodes/{NODE_NAME}")
    assert node["status"]["allocatable"]["gpupool.io/vgpu"] == "10", node["status"]
    gpunode = real.api.get(f"{GPUPOOL_API}/gpunodes/{NODE_NAME}")
    assert [d["uuid"] for d in gpunode["status"]["devices"]] == [driver_uuid(0)]
    # kube-scheduler's extender is the chart's pod (no gpupool process runs beside the cluster)
    names = {p.name for p in real.cluster.running_state().processes}
    assert not {n for n in names if n.startswith("gpupool-")}, names
    port = by_component["extender"]["spec"]["containers"][0]["ports"][0]
    assert port["name"] == "https"
    assert stack.extender_url == _extender_url(port["containerPort"])


def test_a_deployments_12gi_pod_is_placed_through_https_and_runs_with_the_limiter(
    stack: HelmRealNode,
) -> None:
    """kube-scheduler reaches the chart's extender only over HTTPS with the chart's client pair:
    the pod's placement (its allocation) is the extender's bind, answered `ok` to that caller."""
    real = stack.real
    binds_before = _extender_requests(stack, "bind", "ok")
    pod = check_a_deployments_pod_runs_with_its_limit(real, "helm-probe", "probe", 12)
    annotations = pod["metadata"]["annotations"]
    # the chart's webhook mutated it, its controller admitted it, its extender placed it
    assert pod["spec"]["containers"][0]["resources"]["limits"]["gpupool.io/vgpu"] == "1"
    assert "gpupool.io/admitted" in annotations, annotations
    assert _extender_requests(stack, "bind", "ok") >= binds_before + 1
    assert _extender_requests(stack, "filter", "unauthenticated") == 0


def test_a_caller_without_kube_schedulers_certificate_is_refused(stack: HelmRealNode) -> None:
    ca = str(stack.scheduler_tls / "ca.crt")
    # no client certificate: the extender answers 403
    assert _bind_status(stack, ssl.create_default_context(cafile=ca)) == 403
    # one the dev cluster's CA signed (its admin, system:masters even): the handshake fails
    other = ssl.create_default_context(cafile=ca)
    pki = stack.real.cluster.pki_dir
    other.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        _bind_status(stack, other)
    # the chart's pair passes (the bind itself then refuses this made-up pod, in its own words)
    scheduler = ssl.create_default_context(cafile=ca)
    tls = stack.scheduler_tls
    scheduler.load_cert_chain(str(tls / "tls.crt"), str(tls / "tls.key"))
    assert _bind_status(stack, scheduler) == 200


def test_two_12gi_pods_on_the_one_card_each_see_their_own_limit(stack: HelmRealNode) -> None:
    # beside the first test's 12Gi probe, still running: a second 12Gi pod and a 20Gi one
    cards = check_pods_see_their_own_limits(stack.real, "helm-probe", {"twin": 12, "large": 20})
    assert cards == {driver_uuid(0)}  # the node's one card (HELM_GPUS)


def test_a_pod_whose_lease_is_gone_is_refused_by_the_agents_allocate_and_placed_again(
    stack: HelmRealNode,
) -> None:
    check_a_pod_whose_lease_is_gone_is_refused_and_replaced(stack.real, "helm-gone")


def test_down_leaves_nothing_behind_on_the_host(stack: HelmRealNode) -> None:
    check_down_leaves_nothing_behind(stack.real)
