"""The dev cluster end to end: real etcd, kube-apiserver, kube-scheduler and kwok."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.binaries import KUBERNETES_VERSION
from gpupool.devcluster.cluster import DevCluster
from gpupool.devcluster.nodes import node_specs, parse_gpu_spec
from gpupool.devcluster.polling import poll_until
from gpupool.devcluster.processes import is_running
from gpupool.devcluster.scheduler_config import ExtenderConfig
from gpupool.devcluster.spec import ClusterSpec
from gpupool.domain.models import get_model

if TYPE_CHECKING:
    from conftest import E2ECluster

pytestmark = pytest.mark.e2e

# the console script installed beside this interpreter (the project's virtualenv)
GPUPOOL = [str(Path(sys.executable).parent / "gpupool")]


def _ready(node: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in node.get("status", {}).get("conditions", [])
    )


def test_fake_gpu_nodes_appear_with_capacity(dev_cluster: E2ECluster) -> None:
    nodes = dev_cluster.api.get("/api/v1/nodes?labelSelector=type%3Dkwok")["items"]
    assert sorted(n["metadata"]["name"] for n in nodes) == sorted(dev_cluster.state.nodes)
    assert len(nodes) == 4
    for node in nodes:
        labels = node["metadata"]["labels"]
        assert labels["gpupool.io/gpu-model"] == "A100-80GB"
        assert labels["gpupool.io/gpu-count"] == "8"
        assert int(labels["gpupool.io/gpu-memory-bytes"]) == get_model("A100-80GB").memory_bytes
        for key in ("capacity", "allocatable"):
            assert "nvidia.com/gpu" not in node["status"][key], node["status"]
            assert node["status"][key]["gpupool.io/vgpu"] == "80", node["status"]
        assert _ready(node), f"{node['metadata']['name']} is not Ready: {node['status']}"


def test_plain_pod_is_scheduled_and_runs(dev_cluster: E2ECluster, namespace: str) -> None:
    api = dev_cluster.api
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "plain", "namespace": namespace},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/never-pulled:1",
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                }
            ]
        },
    }
    created = api.create(f"/api/v1/namespaces/{namespace}/pods", pod)
    assert not created["spec"].get("nodeName"), "the pod must reach a node through the scheduler"
    path = f"/api/v1/namespaces/{namespace}/pods/plain"

    def running() -> dict[str, Any] | None:
        current: dict[str, Any] = api.get(path)
        return current if current["status"].get("phase") == "Running" else None

    final = poll_until(running, timeout_s=60, interval_s=0.2)
    assert final is not None, f"pod never reached Running: {api.get(path)['status']}"
    assert final["spec"]["nodeName"] in dev_cluster.state.nodes
    conditions = {c["type"]: c["status"] for c in final["status"]["conditions"]}
    assert conditions.get("PodScheduled") == "True"

    def scheduled_event() -> bool:  # kube-scheduler records events asynchronously
        events = api.get(f"/api/v1/namespaces/{namespace}/events")["items"]
        return any(
            e["reason"] == "Scheduled"
            and "default-scheduler"
            in (e.get("reportingComponent"), e.get("source", {}).get("component"))
            for e in events
        )

    assert poll_until(scheduled_event, timeout_s=30, interval_s=0.2), (
        "no Scheduled event from default-scheduler: "
        f"{[e['reason'] for e in api.get(f'/api/v1/namespaces/{namespace}/events')['items']]}"
    )


def test_kubectl_works_with_the_written_kubeconfig(dev_cluster: E2ECluster) -> None:
    kubectl = [str(dev_cluster.binaries.kubectl), "--kubeconfig", str(dev_cluster.kubeconfig)]
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG",)}
    nodes = subprocess.run(
        [*kubectl, "get", "nodes", "-o", "name"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env=env,
    ).stdout.split()
    assert sorted(nodes) == sorted(f"node/{name}" for name in dev_cluster.state.nodes)
    version = json.loads(
        subprocess.run(
            [*kubectl, "version", "-o", "json"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
            env=env,
        ).stdout
    )
    assert version["serverVersion"]["gitVersion"] == KUBERNETES_VERSION
    assert version["clientVersion"]["gitVersion"] == KUBERNETES_VERSION


def _gpupool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GPUPOOL, "dev-cluster", *args],
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_cli_up_status_kubeconfig_down_leaves_no_process(tmp_path: Path) -> None:
    """The command line, as a user runs it, with the scheduler configured for an extender the
    user runs (kube-scheduler validates that configuration at start; nothing here requests
    vgpu): `up` then starts gpupool's other components, not its own extender."""
    state_dir = tmp_path / "cli-cluster"
    cluster_file = tmp_path / "cluster.yaml"  # the simulator's scenario format
    cluster_file.write_text(
        "cluster:\n"
        "  - {name: h100, count: 2, cpu: 64, memory: 512Gi, gpus: 4xH100}\n"
        "  - {name: cpu, count: 1, cpu: 16, memory: 64Gi}\n"
        "workload: []\n"
    )
    up = _gpupool(
        "up",
        "--dir",
        str(state_dir),
        "--cluster-file",
        str(cluster_file),
        "--extender-url",
        "http://127.0.0.1:9/gpupool",
    )
    cluster = DevCluster(state_dir)
    try:
        assert up.returncode == 0, up.stderr
        state = cluster.load_state()
        assert state is not None
        assert [p.name for p in state.processes] == [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kwok",
            "gpupool-webhook",
            "gpupool-controller",
            "gpupool-web",
            "gpupool-heartbeat",
        ]
        assert state.extender_url == "http://127.0.0.1:9/gpupool"
        assert all(is_running(p) for p in state.processes)
        status = _gpupool("status", "--dir", str(state_dir))
        assert status.returncode == 0, status.stdout + status.stderr
        kubeconfig = _gpupool("kubeconfig", "--dir", str(state_dir))
        assert kubeconfig.stdout.strip() == str(state_dir.resolve() / "kubeconfig")
        again = _gpupool("up", "--dir", str(state_dir))
        assert again.returncode == 1
        assert "already runs" in again.stderr
        nodes = cluster.api().get("/api/v1/nodes")["items"]
        vgpus = {n["metadata"]["name"]: n["status"]["capacity"]["gpupool.io/vgpu"] for n in nodes}
        assert vgpus == {"h100-0": "40", "h100-1": "40", "cpu-0": "0"}
        assert "extenders" in (state_dir / "scheduler.yaml").read_text()
        gpunodes = cluster.api().get("/apis/gpupool.io/v1alpha1/gpunodes")["items"]
        assert sorted(g["metadata"]["name"] for g in gpunodes) == ["h100-0", "h100-1"]
        assert all(g["status"]["gpuCount"] == 4 for g in gpunodes)

        # A component that died comes back with `restart`, and `down` knows the new process.
        [kwok] = [p for p in state.processes if p.name == "kwok"]
        os.kill(kwok.pid, signal.SIGKILL)
        assert poll_until(lambda: not is_running(kwok), timeout_s=10)
        broken = _gpupool("status", "--dir", str(state_dir))
        assert broken.returncode == 1 and "STOPPED" in broken.stdout
        restarted = _gpupool("restart", "--dir", str(state_dir), "kwok")
        assert restarted.returncode == 0, restarted.stderr
        new_state = cluster.load_state()
        assert new_state is not None
        [new_kwok] = [p for p in new_state.processes if p.name == "kwok"]
        assert new_kwok.pid != kwok.pid and is_running(new_kwok)
        assert f"pid {new_kwok.pid}" in restarted.stdout
        assert _gpupool("status", "--dir", str(state_dir)).returncode == 0
        unknown = _gpupool("restart", "--dir", str(state_dir), "kubelet")
        assert unknown.returncode == 1
        assert "'kubelet' is not a component" in unknown.stderr
    finally:
        down = _gpupool("down", "--dir", str(state_dir))
    assert down.returncode == 0, down.stderr
    assert "kube-apiserver" in down.stdout
    assert not any(is_running(p) for p in state.processes)
    assert not is_running(new_kwok)
    after = _gpupool("status", "--dir", str(state_dir))
    assert after.returncode == 1
    assert "no dev cluster" in after.stdout


def _start_foreground(state_dir: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            *GPUPOOL,
            "dev-cluster",
            "up",
            "--foreground",
            "--dir",
            str(state_dir),
            "--nodes",
            "1",
            "--gpus",
            "2xL4",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # a shell without job control starts background children with SIGINT ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


@pytest.mark.parametrize("moment", ["while starting", "while running"])
def test_ctrl_c_stops_every_process(tmp_path: Path, moment: str) -> None:
    state_dir = tmp_path / "ctrl-c"
    cluster = DevCluster(state_dir)
    proc = _start_foreground(state_dir)
    before = ""
    started = None
    try:
        if moment == "while starting":

            def apiserver_started() -> bool:
                state = cluster.load_state()
                return state is not None and "kube-apiserver" in [p.name for p in state.processes]

            assert poll_until(apiserver_started, timeout_s=60, interval_s=0.02)
        else:
            assert proc.stdout is not None
            for line in proc.stdout:  # up prints this line once every component is ready
                before += line
                if line.startswith("running in the foreground"):
                    break
            assert "dev cluster up" in before, before
        started = cluster.load_state()  # `down` removes state.json: keep the records
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
        output = before + output
    finally:
        if proc.poll() is None:
            proc.kill()
        cluster.down()
    records = started.processes if started is not None else []
    assert records, output
    assert not any(is_running(p) for p in records), output
    if moment == "while starting":
        assert proc.returncode == 130, output
        assert "interrupted" in output
    else:
        assert proc.returncode == 0, output
        # every component the cluster recorded is named stopped, whatever `up` started
        [line] = [x for x in output.splitlines() if x.startswith("stopped: ")]
        assert set(line.removeprefix("stopped: ").split(", ")) == {p.name for p in records}, line
        assert {"gpupool-controller", "gpupool-extender", "kube-apiserver", "etcd"} <= {
            p.name for p in records
        }, line


class _RecordingExtender:
    """The smallest extender that satisfies kube-scheduler's protocol, recording each call: it
    passes every node, scores them 0, and binds by creating the Binding itself."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.api: KubeApi | None = None
        extender = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                verb = self.path.rsplit("/", 1)[-1]
                extender.calls.append((verb, body))
                reply: Any
                if verb == "filter":
                    reply = {"NodeNames": body["NodeNames"], "FailedNodes": {}, "Error": ""}
                elif verb in ("prioritize", "prioritize-cpu"):
                    reply = [{"Host": name, "Score": 0} for name in body["NodeNames"]]
                else:
                    assert extender.api is not None
                    ns, name = body["PodNamespace"], body["PodName"]
                    extender.api.create(
                        f"/api/v1/namespaces/{ns}/pods/{name}/binding",
                        {
                            "apiVersion": "v1",
                            "kind": "Binding",
                            "metadata": {"name": name, "namespace": ns},
                            "target": {"kind": "Node", "name": body["Node"]},
                        },
                    )
                    reply = {"Error": ""}
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/gpupool"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_scheduler_calls_the_configured_extender(tmp_path: Path) -> None:
    """With an extender URL, kube-scheduler sends vgpu pods through filter, prioritize and bind,
    and every pod through the second entry's prioritize-cpu (scores only: a plain pod is never
    filtered or bound by the extender)."""
    extender = _RecordingExtender()
    cluster = DevCluster(tmp_path / "extender-cluster")
    try:
        cluster.up(
            ClusterSpec(
                nodes=tuple(node_specs(2, parse_gpu_spec("2xA100-80GB"))),
                extender=ExtenderConfig(url_prefix=extender.url),
            ),
            die_with_parent=True,
        )
        api = extender.api = cluster.api()

        def pod(name: str, resources: dict[str, str]) -> dict[str, Any]:
            container = {"name": "c", "image": "x", "resources": {"limits": resources}}
            return {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name},
                "spec": {"containers": [container]},
            }

        api.create("/api/v1/namespaces/default/pods", pod("plain", {"cpu": "1"}))
        api.create("/api/v1/namespaces/default/pods", pod("sliced", {"gpupool.io/vgpu": "1"}))

        def running(name: str) -> Any:
            current = api.get(f"/api/v1/namespaces/default/pods/{name}")
            return current if current["status"].get("phase") == "Running" else None

        for name in ("plain", "sliced"):
            assert poll_until(functools.partial(running, name), timeout_s=60), (
                f"{name} not Running: {api.get(f'/api/v1/namespaces/default/pods/{name}')}"
            )
    finally:
        cluster.down()
        extender.close()
    by_pod: dict[str, list[str]] = {}
    for verb, body in extender.calls:
        by_pod.setdefault(body.get("PodName") or body["Pod"]["metadata"]["name"], []).append(verb)
    sliced = by_pod.pop("sliced")
    # kube-scheduler asks the two entries' prioritize at once: either may come first
    assert sliced[0] == "filter" and sliced[-1] == "bind", sliced
    assert sorted(sliced[1:-1]) == ["prioritize", "prioritize-cpu"], sliced
    assert by_pod == {"plain": ["prioritize-cpu"]}, extender.calls
    filter_args = next(body for verb, body in extender.calls if verb == "filter")
    assert sorted(filter_args["NodeNames"]) == ["gpu-node-0", "gpu-node-1"]
