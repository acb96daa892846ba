"""A real node in the dev cluster: kubelet v1.36 on containerd v2 and runc, gpupool's agent
serving its fake GPU through the real device-plugin API, and GPU pods from a Deployment running in
real containers with the limiter mounted and preloaded over the project's fake CUDA driver; and
containerd's CDI injection of a device the kubelet names as a CDI device.

Needs root and cgroup v1 (the tests skip, saying so, only where the host cannot run a node at
all); the packages and images come from `make realnode` (tools/realnode/setup.sh), which
`make test` runs. The last test takes the cluster down and checks the host is as before.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from support.cdi_device_plugin import CDI_ENV, cdi_device_plugin
from support.real_node import (
    GPUPOOL_API,
    MARKS,
    RealNode,
    check_a_deployments_pod_runs_with_its_limit,
    check_a_pod_whose_lease_is_gone_is_refused_and_replaced,
    check_a_slice_on_each_of_two_cards,
    check_down_leaves_nothing_behind,
    check_pods_on_two_cards_each_see_their_own_card,
    check_pods_see_their_own_limits,
    create_namespace,
    short_root,
    up,
)

from gpupool.devcluster import ClusterSpec
from gpupool.devcluster.binaries import KUBERNETES_VERSION
from gpupool.devcluster.nodes import node_specs, parse_gpu_spec
from gpupool.devcluster.polling import poll_until
from gpupool.devcluster.realnode import host
from gpupool.devcluster.realnode.fake_gpus import DEFAULT_GPUS, driver_uuid
from gpupool.devcluster.realnode.layout import (
    CONTAINERD_NAMESPACE,
    DEVICE_PLUGIN_DIR,
    NODE_IP,
    NODE_NAME,
    PAUSE_IMAGE,
    Layout,
)
from gpupool.devcluster.realnode.node import RealNodeSpec
from gpupool.devcluster.spec import GpupoolSpec
from gpupool.node.device_plugin.decide import allocation_key
from gpupool.node.limiter_usage import read_usage, usage_file

pytestmark = MARKS


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealNode]:
    spec = ClusterSpec(
        nodes=tuple(node_specs(2, parse_gpu_spec("8xA100-80GB"))),
        gpupool=GpupoolSpec(heartbeat_s=2.0, controller_resync_s=1.0),
        real_node=RealNodeSpec(gpus=parse_gpu_spec(DEFAULT_GPUS)),
        ready_timeout_s=120.0,
    )
    with short_root(tmp_path_factory, "real-node") as root:
        real = up(root, spec)
        try:
            yield real
        finally:
            real.cluster.down()


def test_the_real_node_is_ready_and_shows_the_agents_vgpus(real: RealNode) -> None:
    node = real.api.get(f"/api/v1/nodes/{NODE_NAME}")
    conditions = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert conditions["Ready"] == "True", node["status"]["conditions"]
    assert not [t for t in node["spec"].get("taints") or [] if "not-ready" in t["key"]]
    # a real kubelet on containerd, not kwok
    info = node["status"]["nodeInfo"]
    assert info["kubeletVersion"] == KUBERNETES_VERSION
    # containerd v2 (tools/realnode/build-containerd.sh), not Debian's 1.6
    assert info["containerRuntimeVersion"] == f"containerd://{host.CONTAINERD_VERSION[1:]}", info
    assert "kwok.x-k8s.io/node" not in (node["metadata"].get("annotations") or {})
    assert {"type": "InternalIP", "address": NODE_IP} in node["status"]["addresses"]
    # the agent's device plugin, registered with this kubelet: two cards, ten vgpus each
    assert node["status"]["allocatable"]["gpupool.io/vgpu"] == "20", node["status"]
    gpunode = real.api.get(f"{GPUPOOL_API}/gpunodes/{NODE_NAME}")
    assert [d["uuid"] for d in gpunode["status"]["devices"]] == [driver_uuid(0), driver_uuid(1)]
    # the kwok nodes are still kwok's, Ready and untainted
    for name in real.state.nodes:
        kwok = real.api.get(f"/api/v1/nodes/{name}")
        assert kwok["status"]["nodeInfo"]["kubeletVersion"] == "fake"
        assert not kwok["spec"].get("taints"), kwok["spec"]


def test_the_kubelet_api_refuses_anonymous_callers(real: RealNode) -> None:
    node = real.api.get(f"/api/v1/nodes/{NODE_NAME}")
    port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
    context = ssl.create_default_context(cafile=str(real.cluster.pki_dir / "ca.crt"))
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        opener.open(f"https://{NODE_IP}:{port}/pods", timeout=10)
    assert refused.value.code == 401


def test_pods_on_both_cards_each_see_their_own_card(real: RealNode) -> None:
    check_pods_on_two_cards_each_see_their_own_card(real, "probe-cards")


def test_a_deployments_12gi_pod_runs_on_the_real_node_and_sees_12gi(real: RealNode) -> None:
    pod = check_a_deployments_pod_runs_with_its_limit(real, "probe-12", "probe", 12)
    # the limiter in the container kept its accounting in the host folder Allocate mounted,
    # where the agent reads it (docs/metrics.md): its allocations came and went (last activity)
    lease_ns, lease_name = pod["metadata"]["annotations"]["gpupool.io/lease"].split("/")
    lease = real.api.get(f"{GPUPOOL_API}/namespaces/{lease_ns}/gpuleases/{lease_name}")
    key = allocation_key(lease["status"]["deviceIds"])
    usage = read_usage(usage_file(Layout.under(real.cluster.state_dir).usage_dir, key))
    assert usage is not None, f"no accounting file for the pod's container:\n{real.logs()}"
    assert usage.last_active_s is not None


def test_two_more_pods_each_see_their_own_limit(real: RealNode) -> None:
    check_pods_see_their_own_limits(real, "probe-two", {"small": 8, "large": 20})


def test_a_slice_on_each_of_two_cards_shows_as_two_capped_cards(real: RealNode) -> None:
    check_a_slice_on_each_of_two_cards(real, "probe-multi")


def test_a_pod_whose_lease_is_gone_is_refused_by_allocate_and_placed_again(
    real: RealNode,
) -> None:
    check_a_pod_whose_lease_is_gone_is_refused_and_replaced(real, "probe-gone")


def test_containerd_injects_the_cdi_device_the_kubelet_names(real: RealNode) -> None:
    """A device plugin whose Allocate names its device only as a CDI device: the kubelet passes
    the name in the CRI request, and containerd v2 applies the CDI spec's edits to the
    container (Debian's containerd 1.6 would start it without them)."""
    resource = "cdi-check.gpupool.dev/device"
    layout = Layout.under(real.cluster.state_dir)
    with cdi_device_plugin(DEVICE_PLUGIN_DIR, layout.cdi_spec_dir, resource) as plugin:

        def advertised() -> bool:
            node = real.api.get(f"/api/v1/nodes/{NODE_NAME}")
            return node["status"].get("allocatable", {}).get(resource) == "1"

        assert poll_until(advertised, timeout_s=60, interval_s=0.5), real.logs()
        ns = create_namespace(real.api, "cdi-check")
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "cdi"},
            "spec": {
                "nodeName": NODE_NAME,
                "containers": [
                    {
                        "name": "pause",
                        "image": PAUSE_IMAGE,
                        "imagePullPolicy": "Never",
                        "resources": {"limits": {resource: "1"}},
                    }
                ],
            },
        }
        real.api.create(f"/api/v1/namespaces/{ns}/pods", pod)

        def container_id() -> str | None:
            status = real.api.get(f"/api/v1/namespaces/{ns}/pods/cdi")["status"]
            for container in status.get("containerStatuses") or []:
                if "running" in (container.get("state") or {}):
                    return str(container["containerID"]).removeprefix("containerd://")
            return None

        found = poll_until(container_id, timeout_s=120, interval_s=0.5)
        assert found, f"the pod never ran:\n{real.logs()}"
        assert plugin.allocated == [["dev0"]]
        ctr = [str(host.host_tools().ctr), "--address", str(layout.containerd_socket)]
        done = subprocess.run(
            [*ctr, "-n", CONTAINERD_NAMESPACE, "containers", "info", found],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        env = json.loads(done.stdout)["Spec"]["process"]["env"]
        assert CDI_ENV in env, env
        real.api.delete(f"/api/v1/namespaces/{ns}")
        gone = poll_until(lambda: real.api.find(f"/api/v1/namespaces/{ns}") is None, timeout_s=120)
        assert gone, f"namespace {ns} stayed:\n{real.logs()}"


def test_down_leaves_nothing_behind_on_the_host(real: RealNode) -> None:
    check_down_leaves_nothing_behind(real, "gpupool-agent")
