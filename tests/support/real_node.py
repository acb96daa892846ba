"""What the real-node e2e tests share: bringing the dev cluster up with its real node, kubectl
and logs against it, the GPU probe's Deployment as a user writes it, and the checks of what a
pod's slice is, run the same way whether gpupool runs as host processes
(tests/e2e/test_real_node_e2e.py) or as the Helm chart's pods (test_helm_real_node_e2e.py).

Every wait has a hang guard (poll_until's timeout); none asserts a time.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpupool.adapters.kubernetes.pod_view import read_pod
from gpupool.devcluster import ClusterSpec, DevCluster, DevClusterError
from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.binaries import Binaries
from gpupool.devcluster.polling import poll_until
from gpupool.devcluster.realnode import host, snapshot
from gpupool.devcluster.realnode.fake_gpus import driver_uuid
from gpupool.devcluster.realnode.layout import NODE_NAME, PROBE_IMAGE
from gpupool.devcluster.spec import ClusterState
from gpupool.domain.units import GiB
from support.kubelet import short_socket_dir

GPUPOOL_API = "/apis/gpupool.io/v1alpha1"
# The fake driver's card (what the agent's inventory says it is): 80 GiB.
CARD_BYTES = 80 * GiB
# The marks of a real-node test module: e2e, and skipped (saying why) where no node can run.
_UNSUPPORTED = host.unsupported_reason()
MARKS = [
    pytest.mark.e2e,
    pytest.mark.host,  # one real node per host: one worker runs these (tests/conftest.py)
    pytest.mark.skipif(_UNSUPPORTED is not None, reason=f"no real node here: {_UNSUPPORTED}"),
]
# The logs a failure shows the tail of: the node's, and gpupool's host processes' when it has them.
_LOGS = ("kubelet.log", "containerd.log", "kube-scheduler.log", "gpupool-agent.log",
         "gpupool-extender.log")  # fmt: skip
CHART_NAMESPACE = "gpupool-system"


@dataclass(frozen=True)
class RealNode:
    """A running dev cluster with its real node, and the host as it was before `up`."""

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
        """For a failure's message: the tails of the node's logs and of every pod in gpupool's
        namespace (the chart's pods, when it is installed)."""
        parts = [
            f"== {log.name}\n" + "\n".join(log.read_text().splitlines()[-25:])
            for log in self.cluster.logs()
            if log.name in _LOGS
        ]
        pods = self.api.get(f"/api/v1/namespaces/{CHART_NAMESPACE}/pods")["items"]
        for pod in pods:
            name = pod["metadata"]["name"]
            done = subprocess.run(
                [str(self.binaries.kubectl), "--kubeconfig", self.state.kubeconfig,
                 "-n", CHART_NAMESPACE, "logs", name, "--tail=30"],
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            parts.append(f"== {name} {pod['status'].get('phase')}\n{done.stdout}{done.stderr}")
        return "\n".join(parts)

    def probe_output(self, ns: str, pod: str) -> str | None:
        return finished_output(self.kubectl("-n", ns, "logs", pod))


@contextlib.contextmanager
def short_root(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[Path]:
    """The real node's state folder, under /tmp with a short name: containerd refuses a socket
    path over 104 bytes, and pytest's folders under an xdist worker come within two of that.
    Its logs are copied into pytest's own folder (`name`) afterwards, the rest removed."""
    with short_socket_dir(f"gp-{name}-") as root:
        try:
            yield root
        finally:
            if (root / "logs").is_dir():
                shutil.copytree(root / "logs", tmp_path_factory.mktemp(name) / "logs")


def up(root: Path, spec: ClusterSpec) -> RealNode:
    """`up` with the real node in `root` (its components die with the test session); on failure
    the cluster is taken down and the test fails with every log's tail."""
    before = snapshot.capture(str(root))
    cluster = DevCluster(root)
    try:
        state = cluster.up(spec, die_with_parent=True)
    except DevClusterError as err:
        logs = "\n".join(f"== {p}\n{p.read_text()[-3000:]}" for p in cluster.logs())
        cluster.down()
        pytest.fail(f"up --real-node failed: {err}\n{logs}")
    return RealNode(cluster, state, cluster.api(), Binaries.locate(Path(state.bin_dir)), before)


def create_namespace(api: KubeApi, name: str) -> str:
    api.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    return name


def probe_deployment(name: str, memory: str, gpus: int = 1) -> dict[str, Any]:
    """What a user writes: a Deployment whose container asks for gpupool.io/gpu-memory (on each
    of `gpus` cards when more than one)."""
    limits = {"gpupool.io/gpu-memory": memory}
    if gpus > 1:
        limits["gpupool.io/gpu"] = str(gpus)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"type": "real"},
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "probe",
                            "image": PROBE_IMAGE,
                            "imagePullPolicy": "Never",
                            "resources": {"limits": limits},
                        }
                    ],
                },
            },
        },
    }


def running_pod(api: KubeApi, ns: str, app: str) -> dict[str, Any] | None:
    """A pod labelled app=`app` with a running container, or None."""
    pods = api.get(f"/api/v1/namespaces/{ns}/pods?labelSelector=app%3D{app}")["items"]
    for pod in pods:
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        if any((s.get("state") or {}).get("running") for s in statuses):
            return dict(pod)
    return None


def finished_output(logs: str) -> str | None:
    """The probe's log once it has printed everything, else None."""
    return logs if "probe done" in logs else None


def card_of(pod: dict[str, Any]) -> str:
    """The uuid of the one card the extender placed `pod` on (its gpupool.io/allocation)."""
    [piece] = read_pod(pod).allocation
    return piece.uuid


def assert_probe_saw_its_limit(out: str, limit: int, card: str) -> None:
    """The CUDA driver API and NVML report `limit` bytes (never the card's 80 GiB) on the card
    `card`, the container's device 0; an allocation past it fails with CUDA_ERROR_OUT_OF_MEMORY
    and one of half of it succeeds."""
    assert f"cuda: device 0 {card} total {limit} " in out, out
    assert f"cuda: cuMemGetInfo free {limit} total {limit}" in out, out
    assert f"nvml: device 0 {card} total {limit} used 0" in out, out
    assert "(past the total): CUDA_ERROR_OUT_OF_MEMORY" in out, out
    assert "(half the total): CUDA_SUCCESS" in out, out
    assert str(CARD_BYTES) not in out  # the whole card never shows through


def events(api: KubeApi, ns: str, pod: str) -> list[dict[str, Any]]:
    selector = f"involvedObject.name%3D{pod}"
    return list(api.get(f"/api/v1/namespaces/{ns}/events?fieldSelector={selector}")["items"])


# ---- the checks both ways of running gpupool must pass ----------------------------------------


def check_a_deployments_pod_runs_with_its_limit(
    real: RealNode, ns: str, app: str, gib: int
) -> dict[str, Any]:
    """A probe Deployment asking `gib` GiB: its pod runs on the real node, placed by the
    extender (its allocation), and the probe inside sees `gib` GiB. Returns the pod."""
    api = real.api
    if api.find(f"/api/v1/namespaces/{ns}") is None:
        create_namespace(api, ns)
    api.create(f"/apis/apps/v1/namespaces/{ns}/deployments", probe_deployment(app, f"{gib}Gi"))
    pod = poll_until(lambda: running_pod(api, ns, app), timeout_s=180, interval_s=0.5)
    assert pod, f"the Deployment's pod never ran:\n{real.logs()}"
    assert pod["spec"]["nodeName"] == NODE_NAME
    assert "gpupool.io/allocation" in pod["metadata"]["annotations"]
    name = pod["metadata"]["name"]
    out = poll_until(lambda: real.probe_output(ns, name), timeout_s=60, interval_s=0.5)
    assert out, f"no probe output:\n{real.kubectl('-n', ns, 'logs', name)}"
    assert_probe_saw_its_limit(out, gib * GiB, card_of(pod))
    return pod


def check_pods_see_their_own_limits(real: RealNode, ns: str, sizes: dict[str, int]) -> set[str]:
    """One probe Deployment per entry (app -> GiB) in one namespace: each pod's probe sees its
    own slice on its own card, not another's nor the card. Returns the cards they are on."""
    return {
        card_of(check_a_deployments_pod_runs_with_its_limit(real, ns, app, gib))
        for app, gib in sizes.items()
    }


def check_pods_on_two_cards_each_see_their_own_card(real: RealNode, ns: str) -> None:
    """Two pods too big to share an 80 GiB card (60 and 40 GiB) on a node of two: they land on
    both cards, and each probe sees its own card's uuid as its device 0 with its own limit (the
    fake driver shows a container the cards its NVIDIA_VISIBLE_DEVICES names, numbered from 0,
    as NVIDIA's toolkit does). The namespace is deleted afterwards, giving the bytes back."""
    cards = check_pods_see_their_own_limits(real, ns, {"sixty": 60, "forty": 40})
    assert cards == {driver_uuid(0), driver_uuid(1)}, cards
    real.api.delete(f"/api/v1/namespaces/{ns}")
    # gone with its pods and their GpuLeases (namespaced: the namespace controller deletes them)
    gone = poll_until(lambda: real.api.find(f"/api/v1/namespaces/{ns}") is None, timeout_s=120)
    assert gone, f"namespace {ns} stayed:\n{real.logs()}"


def check_a_slice_on_each_of_two_cards(real: RealNode, ns: str) -> None:
    """A Deployment asking 12Gi on each of 2 cards (`gpupool.io/gpu: 2`): its pod runs with a
    slice on both cards of the node, and in the container CUDA and NVML show both cards, each as
    12 GiB, never 80 (the agent's limits file names both cards, the limiter caps each). The
    namespace is deleted afterwards, giving the bytes back."""
    api = real.api
    create_namespace(api, ns)
    api.create(f"/apis/apps/v1/namespaces/{ns}/deployments", probe_deployment("two", "12Gi", 2))
    pod = poll_until(lambda: running_pod(api, ns, "two"), timeout_s=180, interval_s=0.5)
    assert pod, f"the Deployment's pod never ran:\n{real.logs()}"
    slices = read_pod(pod).allocation
    assert sorted(s.uuid for s in slices) == sorted([driver_uuid(0), driver_uuid(1)]), slices
    assert [s.size_bytes for s in slices] == [12 * GiB] * 2
    name = pod["metadata"]["name"]
    out = poll_until(lambda: real.probe_output(ns, name), timeout_s=60, interval_s=0.5)
    assert out, f"no probe output:\n{real.kubectl('-n', ns, 'logs', name)}"
    # per API, device index -> (uuid, total) as the container sees them
    seen: dict[str, dict[str, tuple[str, str]]] = {"cuda:": {}, "nvml:": {}}
    for line in out.splitlines():
        words = line.split()
        if len(words) >= 6 and words[0] in seen and words[1] == "device" and words[4] == "total":
            seen[words[0]][words[2]] = (words[3], words[5])
    cards = {s.uuid for s in slices}
    for api_name, devices in seen.items():
        assert sorted(devices) == ["0", "1"], (api_name, out)
        assert {uuid for uuid, _ in devices.values()} == cards, (api_name, out)
        assert {total for _, total in devices.values()} == {str(12 * GiB)}, (api_name, out)
    assert str(CARD_BYTES) not in out  # the whole card never shows through
    api.delete(f"/api/v1/namespaces/{ns}")
    gone = poll_until(lambda: api.find(f"/api/v1/namespaces/{ns}") is None, timeout_s=120)
    assert gone, f"namespace {ns} stayed:\n{real.logs()}"


def check_a_pod_whose_lease_is_gone_is_refused_and_replaced(real: RealNode, ns: str) -> None:
    """The extender binds a Deployment's pod and writes its lease; the lease is deleted before
    the kubelet gets to the pod (the kubelet is paused for that moment); the agent's Allocate
    must refuse with a message that reaches the pod's events, and the Deployment's next pod
    must run (not stay in ContainerCreating)."""
    api = real.api
    create_namespace(api, ns)
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
        for event in events(api, ns, name):
            if "gpupool lease" in event.get("message", ""):
                return str(event["message"])
        return None

    message = poll_until(refusal, timeout_s=60, interval_s=0.5)
    assert message, f"no refusal in the events: {events(api, ns, name)}\n{real.logs()}"
    assert f"no gpupool lease on node {NODE_NAME}" in message, message

    def replaced() -> dict[str, Any] | None:
        pod = running_pod(api, ns, "gone")
        return pod if pod is not None and pod["metadata"]["name"] != name else None

    again = poll_until(replaced, timeout_s=120, interval_s=0.5)
    assert again, f"no pod ran after the refusal:\n{real.logs()}"
    assert again["spec"]["nodeName"] == NODE_NAME
    refused = api.find(f"/api/v1/namespaces/{ns}/pods/{name}")
    assert refused is None or refused["status"]["phase"] == "Failed", refused["status"]


def check_down_leaves_nothing_behind(real: RealNode, *stopped_at_least: str) -> None:
    stopped = real.cluster.down()
    assert {"kubelet", "containerd", *stopped_at_least} <= set(stopped)
    left = snapshot.left_behind(real.before, snapshot.capture(str(real.cluster.state_dir)))
    assert not left, f"left behind by the real node: {left}"
