"""The scheduler extender end to end: the real kube-scheduler calls `gpupool extender` over HTTP.

One cluster for this module (kube-scheduler configured with the extender URL), the extender run
as a process with `--apply-crds --policy binpack`, exactly as a user would run it.
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.builders import pod_json

from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.cluster import DevCluster
from gpupool.devcluster.errors import ApiError
from gpupool.devcluster.nodes import FakeNodeSpec, build_node, node_specs, parse_gpu_spec
from gpupool.devcluster.polling import poll_until
from gpupool.devcluster.ports import free_port
from gpupool.devcluster.scheduler_config import ExtenderConfig
from gpupool.devcluster.spec import ClusterSpec
from gpupool.domain.units import GiB

pytestmark = pytest.mark.e2e

GPUPOOL = str(Path(sys.executable).parent / "gpupool")
LEASES = "/apis/gpupool.io/v1alpha1"


@dataclass(frozen=True)
class ExtenderCluster:
    cluster: DevCluster
    api: KubeApi
    url: str  # the extender's base URL (with kube-scheduler's prefix)
    log: Path


def _http(url: str, body: bytes | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET")
    req.add_header("Content-Type", "application/json")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError as err:
        return 0, str(err)


@pytest.fixture(scope="module")
def ext_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExtenderCluster]:
    root = tmp_path_factory.mktemp("extender-e2e")
    port = free_port()
    url = f"http://127.0.0.1:{port}/gpupool"
    cluster = DevCluster(root / "cluster")
    state = cluster.up(
        ClusterSpec(
            nodes=tuple(node_specs(2, parse_gpu_spec("8xA100-80GB"))),
            extender=ExtenderConfig(url_prefix=url),
        ),
        die_with_parent=True,
    )
    log = root / "extender.log"
    env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost"}
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                GPUPOOL,
                "extender",
                "--kubeconfig",
                state.kubeconfig,
                "--port",
                str(port),
                "--policy",
                "binpack",
                "--apply-crds",
                "--resync-seconds",
                "30",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        ok = poll_until(
            lambda: _http(f"http://127.0.0.1:{port}/healthz")[0] == 200 or proc.poll() is not None,
            timeout_s=60,
        )
        assert ok and proc.poll() is None, f"extender did not become ready:\n{log.read_text()}"
        yield ExtenderCluster(cluster, cluster.api(), url, log)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        cluster.down()


@pytest.fixture
def ns(ext_cluster: ExtenderCluster) -> str:
    name = f"ext-{secrets.token_hex(3)}"
    ext_cluster.api.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
    )
    return name


def _pod(name: str, memory: str, hostname: str | None = None) -> dict[str, Any]:
    return pod_json(name, gpu_memory=memory, vgpu=1, hostname=hostname)


def _running(api: KubeApi, ns: str, name: str) -> dict[str, Any] | None:
    pod: dict[str, Any] = api.get(f"/api/v1/namespaces/{ns}/pods/{name}")
    return pod if pod["status"].get("phase") == "Running" else None


def test_three_12gi_pods_share_one_card_with_disjoint_slices(
    ext_cluster: ExtenderCluster, ns: str
) -> None:
    """One after the other: kube-scheduler binds asynchronously, so a pod's filter can run
    before the previous pod's bind has reserved its slice; binpack packs what it has seen."""
    api = ext_cluster.api
    names = ["a", "b", "c"]
    pods = {}
    for name in names:
        api.create(f"/api/v1/namespaces/{ns}/pods", _pod(name, "12Gi"))
        pod = poll_until(lambda n=name: _running(api, ns, n), timeout_s=60)
        assert pod, f"{name} not Running:\n{ext_cluster.log.read_text()[-3000:]}"
        pods[name] = pod
    nodes = {p["spec"]["nodeName"] for p in pods.values()}
    assert len(nodes) == 1, f"binpack should keep them on one node: {nodes}"
    slices = {}
    for name, pod in pods.items():
        annotations = pod["metadata"]["annotations"]
        [alloc] = json.loads(annotations["gpupool.io/allocation"])
        slices[name] = alloc
        assert alloc["sizeBytes"] == 12 * GiB
        assert alloc["model"] == "A100-80GB"
        lease_key = annotations["gpupool.io/lease"]
        assert lease_key == f"{ns}/{pod['metadata']['uid']}"
        # the extender creates the lease just after the Binding: wait for it
        lease = poll_until(lambda p=pod: _lease(api, ns, p["metadata"]["uid"]), timeout_s=30)
        assert lease, f"no GpuLease for {name}:\n{ext_cluster.log.read_text()[-3000:]}"
        assert lease["spec"]["node"] == pod["spec"]["nodeName"]
        assert lease["spec"]["podRef"] == {
            "namespace": ns,
            "name": name,
            "uid": pod["metadata"]["uid"],
        }
        assert lease["spec"]["devices"] == [alloc]
    assert len({s["uuid"] for s in slices.values()}) == 1, f"not one card: {slices}"
    _assert_disjoint([r for s in slices.values() for r in _ranges(s)])


def _lease(api: Any, ns: str, uid: str) -> dict[str, Any] | None:
    """The pod's GpuLease, None while it is not made yet (404)."""
    try:
        lease: dict[str, Any] = api.get(f"{LEASES}/namespaces/{ns}/gpuleases/{uid}")
    except ApiError as err:
        if err.status == 404:
            return None
        raise
    return lease


def _ranges(device: dict[str, Any]) -> list[tuple[int, int]]:
    """A slice's logical ranges [start, end): its extents, which add up to its size (none: one
    range, as a lease written before extents or by hand)."""
    extents = device.get("extents") or [device]
    assert sum(e["sizeBytes"] for e in extents) == device["sizeBytes"], device
    assert extents[0]["offsetBytes"] == device["offsetBytes"], device
    return [(e["offsetBytes"], e["offsetBytes"] + e["sizeBytes"]) for e in extents]


def _assert_disjoint(ranges: list[tuple[int, int]]) -> None:
    ranges = sorted(ranges)
    for (_, end), (start, _) in itertools.pairwise(ranges):
        assert end <= start, f"slices overlap: {ranges}"


def test_concurrent_pods_never_double_book_a_card(ext_cluster: ExtenderCluster, ns: str) -> None:
    """Twelve 30Gi pods at once (two fit a 72Gi card): however kube-scheduler interleaves
    filter and bind, no card holds more than it has and no two slices overlap."""
    api = ext_cluster.api
    names = [f"p{i}" for i in range(12)]
    for name in names:
        api.create(f"/api/v1/namespaces/{ns}/pods", _pod(name, "30Gi"))
    for name in names:
        assert poll_until(lambda n=name: _running(api, ns, n), timeout_s=90), (
            f"{name} not Running:\n{ext_cluster.log.read_text()[-3000:]}"
        )

    # the extender creates each lease just after its Binding: wait until all stand
    def all_leases() -> list[dict[str, Any]] | None:
        items: list[dict[str, Any]] = api.get(f"{LEASES}/namespaces/{ns}/gpuleases")["items"]
        return items if len(items) >= len(names) else None

    leases = poll_until(all_leases, timeout_s=30)
    assert leases, f"not every pod's GpuLease stands:\n{ext_cluster.log.read_text()[-3000:]}"
    assert sorted(x["spec"]["podRef"]["name"] for x in leases) == sorted(names)
    per_card: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for lease in leases:
        for d in lease["spec"]["devices"]:
            key = (lease["spec"]["node"], d["uuid"])
            per_card.setdefault(key, []).extend(_ranges(d))
    for card, ranges in per_card.items():
        assert sum(end - start for start, end in ranges) <= 72 * GiB, (card, ranges)
        _assert_disjoint(ranges)


def _gpu_node(api: KubeApi, cards: int) -> tuple[str, list[dict[str, Any]]]:
    """A fresh fake node of `cards` A100-80GB with its GpuNode (72Gi allocatable per card)."""
    node = f"n{cards}-{secrets.token_hex(2)}"
    api.create(
        "/api/v1/nodes", build_node(FakeNodeSpec(node, parse_gpu_spec(f"{cards}xA100-80GB")))
    )
    api.create(
        f"{LEASES}/gpunodes",
        {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": "GpuNode",
            "metadata": {"name": node},
            "spec": {},
        },
    )
    devices = [
        {
            "uuid": f"GPU-{node}-{i}",
            "index": i,
            "model": "A100-80GB",
            "memoryBytes": 80 * GiB,
            "allocatableBytes": 72 * GiB,
        }
        for i in range(cards)
    ]
    api.request(
        "PUT",
        f"{LEASES}/gpunodes/{node}/status",
        {
            **api.get(f"{LEASES}/gpunodes/{node}"),
            "status": {"gpuCount": cards, "health": "Healthy", "devices": devices},
        },
    )
    return node, devices


def _held_lease(
    ns: str, node: str, device: dict[str, Any], offset: int, size: int, **extra: Any
) -> dict[str, Any]:
    """A lease of a pod elsewhere in the namespace holding [offset, offset + size) of a card."""
    uid = f"held-{secrets.token_hex(4)}"
    return {
        "apiVersion": "gpupool.io/v1alpha1",
        "kind": "GpuLease",
        "metadata": {"name": uid, "labels": {"gpupool.io/node": node}},
        "spec": {
            "tenant": "default",
            "podRef": {"namespace": ns, "name": uid, "uid": uid},
            "node": node,
            "devices": [
                {
                    **{k: device[k] for k in ("uuid", "index", "model")},
                    "offsetBytes": offset,
                    "sizeBytes": size,
                    **extra,
                }
            ],
            "amount": size,
        },
    }


def test_60gi_pod_is_not_placed_on_four_cards_with_50gi_free_and_the_reason_says_why(
    ext_cluster: ExtenderCluster, ns: str
) -> None:
    api = ext_cluster.api
    node, devices = _gpu_node(api, 4)
    # 22Gi held on every card (leases of pods elsewhere in the namespace): 50Gi free on each.
    for i in range(4):
        api.create(
            f"{LEASES}/namespaces/{ns}/gpuleases", _held_lease(ns, node, devices[i], 0, 22 * GiB)
        )
    api.create(
        f"/api/v1/namespaces/{ns}/pods",
        _pod("big", "60Gi", hostname=node),
    )

    def failed_scheduling() -> str | None:
        events = api.get(f"/api/v1/namespaces/{ns}/events?fieldSelector=involvedObject.name%3Dbig")[
            "items"
        ]
        for event in events:
            if event["reason"] == "FailedScheduling" and "largest free" in event["message"]:
                return str(event["message"])
        return None

    message = poll_until(failed_scheduling, timeout_s=60)
    assert message, (
        f"no FailedScheduling event with the extender's reason; events: "
        f"{api.get(f'/api/v1/namespaces/{ns}/events')['items']}\n"
        f"{ext_cluster.log.read_text()[-3000:]}"
    )
    assert "insufficient memory on every card (largest free 50Gi < 60Gi)" in message, message
    pod = api.get(f"/api/v1/namespaces/{ns}/pods/big")
    assert not pod["spec"].get("nodeName"), f"placed anyway on {pod['spec'].get('nodeName')}"
    leases = api.get(f"{LEASES}/namespaces/{ns}/gpuleases")["items"]
    assert all(x["spec"]["podRef"]["name"] != "big" for x in leases)


def test_a_pod_that_fits_a_fragmented_card_by_bytes_takes_several_free_ranges(
    ext_cluster: ExtenderCluster, ns: str
) -> None:
    """Held on the one 72Gi card: [0, 20), [30, 50), [60, 70) Gi. A 21Gi pod fits by bytes (22Gi
    free) though no free range is longer than 10Gi: its slice is laid out over the free ranges,
    lowest first, sharing no byte with the leases held."""
    api = ext_cluster.api
    node, devices = _gpu_node(api, 1)
    leases = f"{LEASES}/namespaces/{ns}/gpuleases"
    for start, end in ((0, 20), (30, 50), (60, 70)):
        api.create(leases, _held_lease(ns, node, devices[0], start * GiB, (end - start) * GiB))
    # the schema refuses extents that are no layout of the slice
    bad = _held_lease(ns, node, devices[0], 20 * GiB, 2 * GiB,
                      extents=[{"offsetBytes": 20 * GiB, "sizeBytes": GiB}])  # fmt: skip
    with pytest.raises(ApiError) as refused:
        api.create(leases, bad)
    assert refused.value.status == 422 and "add up to sizeBytes" in str(refused.value)

    api.create(
        f"/api/v1/namespaces/{ns}/pods",
        _pod("split", "21Gi", hostname=node),
    )
    pod = poll_until(lambda: _running(api, ns, "split"), timeout_s=60)
    assert pod, f"split not Running:\n{ext_cluster.log.read_text()[-3000:]}"
    (alloc,) = json.loads(pod["metadata"]["annotations"]["gpupool.io/allocation"])
    assert alloc["extents"] == [
        {"offsetBytes": 20 * GiB, "sizeBytes": 10 * GiB},
        {"offsetBytes": 50 * GiB, "sizeBytes": 10 * GiB},
        {"offsetBytes": 70 * GiB, "sizeBytes": GiB},
    ]
    # the extender creates the lease after the Binding, in the background: wait for it
    lease = poll_until(lambda: _lease(api, ns, pod["metadata"]["uid"]), timeout_s=30)
    assert lease, f"no GpuLease for split:\n{ext_cluster.log.read_text()[-3000:]}"
    assert lease["spec"]["devices"] == [alloc]
    held = api.get(leases)["items"]
    _assert_disjoint([r for x in held for d in x["spec"]["devices"] for r in _ranges(d)])


@pytest.mark.parametrize(
    ("verb", "body", "says"),
    [
        ("filter", b"{not json", "not JSON"),
        ("filter", b'{"NodeNames": ["n1"]}', "Pod"),
        ("prioritize", b'["a list"]', "JSON object"),
        ("bind", b'{"PodName": "p", "PodNamespace": "d", "Node": "n"}', "PodUID"),
    ],
)
def test_malformed_extender_request_is_answered_400_with_a_message(
    ext_cluster: ExtenderCluster, verb: str, body: bytes, says: str
) -> None:
    status, text = _http(f"{ext_cluster.url}/{verb}", body)
    assert status == 400, (status, text)
    assert says in json.loads(text)["error"], text


def test_metrics_count_the_calls(ext_cluster: ExtenderCluster) -> None:
    _http(f"{ext_cluster.url}/filter", b"[]")
    status, text = _http(ext_cluster.url.rsplit("/", 1)[0] + "/metrics")
    assert status == 200
    assert 'gpupool_extender_requests_total{outcome="bad_request",verb="filter"}' in text


def _calls(ext_cluster: ExtenderCluster, verb: str) -> float:
    """The extender's answered calls of `verb` so far (its /metrics)."""
    status, text = _http(ext_cluster.url.rsplit("/", 1)[0] + "/metrics")
    assert status == 200, text
    for family in text_string_to_metric_families(text):
        if family.name == "gpupool_extender_requests":
            return sum(
                s.value
                for s in family.samples
                if s.name.endswith("_total") and s.labels == {"verb": verb, "outcome": "ok"}
            )
    return 0.0


def test_kube_scheduler_skips_scoring_when_filter_answers_the_pick(
    ext_cluster: ExtenderCluster, ns: str
) -> None:
    """Both nodes fit a 4Gi pod: /filter answers the planner's pick alone, so kube-scheduler
    binds there without calling /prioritize. A pod with a preferred node affinity gets every
    node that fits, and kube-scheduler scores them (the extender's /prioritize is called)."""
    api = ext_cluster.api
    before = _calls(ext_cluster, "prioritize")
    filtered = _calls(ext_cluster, "filter")
    api.create(f"/api/v1/namespaces/{ns}/pods", _pod("plain-pick", "4Gi"))
    assert poll_until(lambda: _running(api, ns, "plain-pick"), timeout_s=60), (
        ext_cluster.log.read_text()[-3000:]
    )
    assert _calls(ext_cluster, "filter") > filtered
    assert _calls(ext_cluster, "prioritize") == before
    soft = _pod("soft", "4Gi")
    prefer = {"weight": 10, "preference": {"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "Exists"}
    ]}}  # fmt: skip
    soft["spec"]["affinity"] = {
        "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [prefer]}
    }
    api.create(f"/api/v1/namespaces/{ns}/pods", soft)
    assert poll_until(lambda: _running(api, ns, "soft"), timeout_s=60), ext_cluster.log.read_text()[
        -3000:
    ]
    assert _calls(ext_cluster, "prioritize") > before


def test_agent_lease_source_and_gpunode_reporter_against_the_api_server(
    ext_cluster: ExtenderCluster, ns: str
) -> None:
    """The node agent's Kubernetes seams: it sees the lease the extender made for a pod on its
    node and records the kubelet's device IDs on it; its report becomes the node's GpuNode."""
    import asyncio

    from gpupool.adapters.kubeclient import async_client
    from gpupool.adapters.kubernetes.lease_source import KubernetesAllocationSource
    from gpupool.adapters.kubernetes.reporter import KubernetesGpuNodeReporter
    from gpupool.domain.devices import Gpu
    from gpupool.ports import GpuFacts, InventoryFacts, NodeReport

    api = ext_cluster.api
    api.create(f"/api/v1/namespaces/{ns}/pods", _pod("agent", "8Gi"))
    pod = poll_until(lambda: _running(api, ns, "agent"), timeout_s=60)
    assert pod
    node, uid = pod["spec"]["nodeName"], pod["metadata"]["uid"]
    kubeconfig = Path(ext_cluster.cluster.state_dir) / "kubeconfig"

    async def agent_side() -> tuple[Any, ...]:
        client = async_client(kubeconfig)
        source = KubernetesAllocationSource(client)
        mine = [x for x in await source.leases_on(node) if x.pod_uid == uid]
        await source.record_devices(mine[0].lease, ("vgpu-3",))
        name = f"reported-{secrets.token_hex(2)}"
        await KubernetesGpuNodeReporter(client).publish(
            NodeReport(
                node=name,
                gpus=(Gpu(index=0, model="H100", uuid="GPU-r-0"),),
                facts=InventoryFacts("550.1", "12.4", (GpuFacts("GPU-r-0", 132),)),
                reserve_pct=10.0,
                allocatable_bytes=(("GPU-r-0", 70 * GiB),),
            )
        )
        return mine[0], name

    lease, reported = asyncio.run(agent_side())
    assert lease.lease == f"{ns}/{uid}"
    assert lease.slices[0].size_bytes == 8 * GiB
    stored = api.get(f"{LEASES}/namespaces/{ns}/gpuleases/{uid}")
    assert stored["status"]["deviceIds"] == ["vgpu-3"]
    gpunode = api.get(f"{LEASES}/gpunodes/{reported}")
    assert gpunode["status"]["devices"][0]["allocatableBytes"] == 70 * GiB
    assert gpunode["status"]["devices"][0]["smCount"] == 132
    assert gpunode["status"]["health"] == "Healthy"
