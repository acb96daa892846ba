"""A card is never served by two paths, on the dev cluster with all of gpupool (kwok nodes).

Before (issue 26 item 5, reproduced on this cluster before the change): every fake node
advertised `nvidia.com/gpu: 8` beside `gpupool.io/vgpu: 80`, as if NVIDIA's device plugin ran
there too; a pod asking only `nvidia.com/gpu: 8` and opted out of gpupool ran on a node whose
eight cards a gpupool pod held in a GpuLease (no gate, no lease, in no quota): both paths
handed out the same cards. A pod asking `nvidia.com/gpu` without opting out, or with HAMi's
names, is adopted by the webhook and goes through gpupool (tests/e2e/test_hami_e2e.py).

Now a fake node is gpupool's alone, and a node where another path shows up is refused:
- such an opted-out pod finds no node (nobody else offers `nvidia.com/gpu`);
- `nvidia.com/gpu: 8` patched into a node's status (NVIDIA's device plugin, simulated): its
  GpuNode gets `OtherGpuPath` True (`OtherDevicePlugin`, the message naming the resource and
  what to do), a Warning Event on the Node, the agent's `/metrics` says 1 and 8 devices; the
  extender refuses the node to a HAMi-style pod pinned there (kube-scheduler's reason quotes
  it), which gets no lease while the opted-out pod runs there on the other path;
- the resource back at 0: the condition clears (Event `OtherGpuPathGone`) and the pinned pod
  is placed there by gpupool;
- another DRA driver's ResourceSlice naming a node's cards: `OtherDraDriver`, the node refused.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from support.builders import pod_json
from support.waiting import wait_until

from gpupool.adapters.wire.names import ANN_FAKE_HEARTBEAT
from gpupool.devcluster.nodes import other_device_plugin
from gpupool.devcluster.ports import free_port

if TYPE_CHECKING:
    from conftest import E2ECluster

    from gpupool.devcluster.apiclient import KubeApi

pytestmark = pytest.mark.e2e

GPUPOOL_API = "/apis/gpupool.io/v1alpha1"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
LOOPBACK = "127.0.0.1"


def _namespace(api: KubeApi) -> str:
    name = f"paths-{secrets.token_hex(3)}"
    api.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
    )
    return name


def _condition(api: KubeApi, node: str) -> dict[str, Any] | None:
    gpunode = api.find(f"{GPUPOOL_API}/gpunodes/{node}") or {}
    for cond in (gpunode.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "OtherGpuPath":
            return dict(cond)
    return None


def _condition_is(api: KubeApi, node: str, status: str) -> dict[str, Any] | None:
    cond = _condition(api, node)
    return cond if cond is not None and cond.get("status") == status else None


def _node_events(api: KubeApi, node: str, reason: str) -> list[dict[str, Any]]:
    events = api.get("/api/v1/namespaces/default/events")["items"]
    return [
        e
        for e in events
        if e["involvedObject"].get("kind") == "Node"
        and e["involvedObject"].get("name") == node
        and e.get("reason") == reason
    ]


def _pod(api: KubeApi, ns: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = api.get(f"/api/v1/namespaces/{ns}/pods/{name}")
    return found


def _unschedulable(api: KubeApi, ns: str, name: str) -> str | None:
    """kube-scheduler's message when it could not place the pod, else None."""
    for cond in _pod(api, ns, name)["status"].get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
            return str(cond.get("message") or "")
    return None


def _why_not_bound(api: KubeApi, ns: str, name: str, node: str) -> str:
    """What a failure says of a pod left unbound: kube-scheduler's reason, and what the node
    holds and shows. (It named the order dependence this test had in the full suite: a pod of
    test_hami_e2e asking nvidia.com/gpu: 1, left pending, took one of the node's 8 the moment
    this test made the node offer them; that test now deletes it.)"""
    seen = api.get(f"/api/v1/nodes/{node}")
    on_node = api.get(f"/api/v1/pods?fieldSelector=spec.nodeName={node}")["items"]
    held = [
        f"{p['metadata']['namespace']}/{p['metadata']['name']} ({p['status'].get('phase')})"
        for p in on_node
    ]
    return (
        f"kube-scheduler: {_unschedulable(api, ns, name)!r}; node {node}: allocatable "
        f"{seen['status'].get('allocatable')}, taints {seen['spec'].get('taints')}, "
        f"unschedulable {seen['spec'].get('unschedulable')}, {len(held)} pods: {held[:20]}"
    )


def _leases_on(api: KubeApi, node: str) -> list[dict[str, Any]]:
    leases = api.get(f"{GPUPOOL_API}/gpuleases")["items"]
    return [x for x in leases if x["spec"].get("node") == node]


def _metrics(url: str) -> str:
    with urllib.request.urlopen(f"http://{url}/metrics", timeout=5) as resp:
        text: str = resp.read().decode()
    return text


def _metrics_with(url: str, line: str) -> str | None:
    """The agent's /metrics once they hold `line`, else None (also while it is starting)."""
    try:
        text = _metrics(url)
    except OSError:  # not listening yet (urllib's URLError is an OSError)
        return None
    return text if line in text else None


@pytest.fixture
def agent(gpupool_cluster: E2ECluster, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A real `gpupool agent` (fake cards, no kubelet: its device plugin keeps retrying the
    registration) for the last fake node, watching for other paths, with the dev
    cluster's fake agent paused there, so what the node shows is the real agent's; yields the
    node and its metrics address."""
    c = gpupool_cluster
    node = sorted(c.state.nodes)[-1]
    gpunode = f"{GPUPOOL_API}/gpunodes/{node}"
    c.api.patch(gpunode, {"metadata": {"annotations": {ANN_FAKE_HEARTBEAT: "paused"}}})
    port = free_port()
    log = (tmp_path / "agent.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpupool.cli.main", "agent", "--node-name", node,
         "--fake-gpus", str(c.gpus), "--kubeconfig", str(c.kubeconfig),
         "--device-plugin-dir", str(tmp_path / "plugins"), "--limits-dir", str(tmp_path / "lim"),
         "--usage-dir", str(tmp_path / "usage"),
         "--metrics-address", f"{LOOPBACK}:{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        yield node, f"{LOOPBACK}:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
        c.api.patch(f"/api/v1/nodes/{node}/status", other_device_plugin(0))
        c.api.patch(gpunode, {"metadata": {"annotations": {ANN_FAKE_HEARTBEAT: None}}})


def test_a_node_another_device_plugin_serves_is_refused_and_said_so(
    gpupool_cluster: E2ECluster, agent: tuple[str, str]
) -> None:
    c = gpupool_cluster
    node, metrics = agent
    ns = _namespace(c.api)
    # every fake node is gpupool's alone: the agents say so, nobody offers nvidia.com/gpu
    for name in c.state.nodes:
        cond = wait_until(
            lambda n=name: _condition_is(c.api, n, "False"), 60, f"{name}'s OtherGpuPath False"
        )
        assert cond["reason"] == "OnlyGpupool", cond
    opted_out = pod_json(
        "nvidia", limits={"nvidia.com/gpu": "8"}, grace_s=0,
        annotations={"gpupool.io/adopt-nvidia-gpu": "false"},
    )  # fmt: skip
    c.api.create(f"/api/v1/namespaces/{ns}/pods", opted_out)
    message = wait_until(lambda: _unschedulable(c.api, ns, "nvidia"), 60, "nvidia to be refused")
    assert "nvidia.com/gpu" in message, message
    # made again once the other path is there (below): kube-scheduler may hold a pod it found
    # unschedulable for minutes before a node's new resource brings it back to its queue
    c.api.delete(f"/api/v1/namespaces/{ns}/pods/nvidia")
    gone = f"/api/v1/namespaces/{ns}/pods/nvidia"
    wait_until(lambda: c.api.find(gone) is None, 60, "nvidia gone")

    # NVIDIA's device plugin shows up on one node
    c.api.patch(f"/api/v1/nodes/{node}/status", other_device_plugin(8))
    cond = wait_until(lambda: _condition_is(c.api, node, "True"), 60, "OtherGpuPath True")
    assert cond["reason"] == "OtherDevicePlugin", cond
    assert "device plugin resource nvidia.com/gpu (8 on the Node)" in cond["message"], cond
    assert "nvidia.com/gpu.deploy.device-plugin=false" in cond["message"], cond
    event = wait_until(
        lambda: _node_events(c.api, node, "OtherGpuPath"), 30, "the Warning Event on the Node"
    )[0]
    assert event["type"] == "Warning" and "nvidia.com/gpu" in event["message"], event
    assert event["source"]["component"] == "gpupool-agent", event  # the real agent said it
    said = f'gpupool_agent_other_gpu_path{{Hostname="{node}"}} 1.0'
    text = wait_until(lambda: _metrics_with(metrics, said), 30, "the agent's metric to say 1")
    assert (
        "gpupool_agent_other_gpu_path_devices{"
        f'Hostname="{node}",kind="device-plugin",path="nvidia.com/gpu"}} 8.0'
    ) in text

    # the other path's pod runs there, outside gpupool; a HAMi-style pod pinned there is
    # refused by gpupool's extender with the agent's words, and gets no lease
    c.api.create(f"/api/v1/namespaces/{ns}/pods", opted_out)
    running = wait_until(
        lambda: (p := _pod(c.api, ns, "nvidia"))["spec"].get("nodeName") and p,
        60,
        lambda: f"nvidia bound ({_why_not_bound(c.api, ns, 'nvidia', node)})",
    )
    assert running["spec"]["nodeName"] == node
    hami = pod_json(
        "hami", limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}, hostname=node
    )
    c.api.create(f"/api/v1/namespaces/{ns}/pods", hami)
    refused = wait_until(lambda: _unschedulable(c.api, ns, "hami"), 60, "hami to be refused")
    assert f"another path hands out the GPUs of node {node}" in refused, refused
    assert _pod(c.api, ns, "hami")["spec"].get("nodeName") is None
    assert not [x for x in _leases_on(c.api, node) if x["metadata"]["namespace"] == ns]

    # the other path goes (its pod first, then the plugin): the node is gpupool's again
    c.api.delete(f"/api/v1/namespaces/{ns}/pods/nvidia?gracePeriodSeconds=0")
    c.api.patch(f"/api/v1/nodes/{node}/status", other_device_plugin(0))
    cond = wait_until(lambda: _condition_is(c.api, node, "False"), 60, "OtherGpuPath False")
    assert cond["reason"] == "OnlyGpupool", cond
    wait_until(lambda: _node_events(c.api, node, "OtherGpuPathGone"), 30, "the Gone Event")
    said = f'gpupool_agent_other_gpu_path{{Hostname="{node}"}} 0.0'
    wait_until(lambda: _metrics_with(metrics, said), 30, "the agent's metric to say 0")
    placed = wait_until(
        lambda: (p := _pod(c.api, ns, "hami"))["spec"].get("nodeName") and p,
        90,
        lambda: f"hami placed ({_why_not_bound(c.api, ns, 'hami', node)})",
    )
    assert placed["spec"]["nodeName"] == node
    lease = wait_until(
        lambda: [x for x in _leases_on(c.api, node) if x["metadata"]["namespace"] == ns],
        30, "hami's GpuLease",
    )  # fmt: skip
    assert lease[0]["spec"]["devices"][0]["sizeBytes"] == 3000 * 2**20


def test_a_node_another_dra_driver_serves_is_refused(gpupool_cluster: E2ECluster) -> None:
    c = gpupool_cluster
    node = sorted(c.state.nodes)[0]
    gpunode = c.api.get(f"{GPUPOOL_API}/gpunodes/{node}")
    uuids = [d["uuid"] for d in gpunode["status"]["devices"]]
    name = f"{node}-gpu.nvidia.com-{secrets.token_hex(3)}"
    c.api.create(
        SLICES,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": {
                "driver": "gpu.nvidia.com",
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {"name": f"gpu-{i}", "attributes": {"uuid": {"string": u}}}
                    for i, u in enumerate(uuids)
                ],
            },
        },
    )
    try:
        cond = wait_until(lambda: _condition_is(c.api, node, "True"), 60, "OtherGpuPath True")
        assert cond["reason"] == "OtherDraDriver", cond
        assert (
            f"DRA driver gpu.nvidia.com ({len(uuids)} device(s) in ResourceSlice {name})"
            in (cond["message"])
        ), cond
        wait_until(lambda: _node_events(c.api, node, "OtherGpuPath"), 30, "the Event")
        ns = _namespace(c.api)
        c.api.create(
            f"/api/v1/namespaces/{ns}/pods", pod_json("pinned", gpu_memory="12Gi", hostname=node)
        )
        refused = wait_until(lambda: _unschedulable(c.api, ns, "pinned"), 60, "pinned refused")
        assert "DRA driver gpu.nvidia.com" in refused, refused
    finally:
        c.api.delete(f"{SLICES}/{name}")
    wait_until(lambda: _condition_is(c.api, node, "False"), 60, "OtherGpuPath False again")
