"""All of gpupool on the dev cluster, as `gpupool dev-cluster up` runs it: a user's pod asking for
12Gi goes through the webhook, the controller's quota gate, kube-scheduler with the extender and
the extender's bind; a node that stops heartbeating loses its leases and its pods, and the
replacement lands on a healthy node.

The lost node's pod belongs to a real ReplicaSet: kube-controller-manager's ReplicaSet controller
makes its pods, and the replacement once the pod on the lost node is deleted.
"""

from __future__ import annotations

import itertools
import json
import secrets
import subprocess
from typing import TYPE_CHECKING, Any

import pytest

from gpupool.adapters.kubernetes.node_lease import NODE_LEASE_NAMESPACE
from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.heartbeat import PAUSE_ANNOTATION, PAUSED
from gpupool.devcluster.polling import poll_until
from gpupool.domain.units import GiB

if TYPE_CHECKING:
    from conftest import E2ECluster

pytestmark = pytest.mark.e2e

GPUPOOL_API = "/apis/gpupool.io/v1alpha1"


def _namespace(api: KubeApi) -> str:
    name = f"full-{secrets.token_hex(3)}"
    api.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
    )
    return name


def _pod_spec(memory: str, avoid_node: str | None = None) -> dict[str, Any]:
    """What a user writes: only gpupool.io/gpu-memory (the webhook adds the rest)."""
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "registry.example/infer:1",
                "resources": {"limits": {"gpupool.io/gpu-memory": memory}},
            }
        ]
    }
    if avoid_node is not None:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "kubernetes.io/hostname",
                                    "operator": "NotIn",
                                    "values": [avoid_node],
                                }
                            ]
                        }
                    ]
                }
            }
        }
    return spec


def _get(api: KubeApi, path: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = api.find(path)
    return found


def _running(api: KubeApi, ns: str, name: str) -> dict[str, Any] | None:
    pod = _get(api, f"/api/v1/namespaces/{ns}/pods/{name}")
    return pod if pod is not None and pod["status"].get("phase") == "Running" else None


def _lease(api: KubeApi, pod: dict[str, Any]) -> dict[str, Any]:
    ns, uid = pod["metadata"]["annotations"]["gpupool.io/lease"].split("/")
    lease = _get(api, f"{GPUPOOL_API}/namespaces/{ns}/gpuleases/{uid}")
    assert lease is not None, f"no lease for {pod['metadata']['name']}"
    return lease


def _kubectl(c: E2ECluster, *args: str) -> None:
    subprocess.run(
        [str(c.binaries.kubectl), "--kubeconfig", str(c.kubeconfig), *args],
        check=True,
        capture_output=True,
        timeout=30,
    )


def _gpunode_writes_since(api: KubeApi, node: str, version: str) -> list[dict[str, Any]]:
    """Every version of GpuNode `node` written after `version`, from a watch that replays them
    and ends a second later."""
    body = api.get(
        f"{GPUPOOL_API}/gpunodes?watch=1&resourceVersion={version}&timeoutSeconds=1"
        f"&fieldSelector=metadata.name%3D{node}"
    )
    if isinstance(body, dict):
        lines = [body]
    else:
        lines = [json.loads(x) for x in str(body).splitlines() if x]
    return [e["object"] for e in lines if e.get("type") == "MODIFIED"]


def _content(obj: Any) -> Any:
    """`obj` without what every write moves (its version, field managers) and without times."""
    if isinstance(obj, dict):
        return {
            k: _content(v)
            for k, v in obj.items()
            if k not in ("resourceVersion", "managedFields", "generation")
            and not k.endswith("Time")
            and "eartbeat" not in k
        }
    if isinstance(obj, list):
        return [_content(v) for v in obj]
    return obj


def _logs(c: E2ECluster) -> str:
    return "\n".join(
        f"== {log.name}\n" + "\n".join(log.read_text().splitlines()[-15:])
        for log in c.cluster.logs()
        if log.name.startswith("gpupool-")
    )


class _ReplicaSet:
    """A real ReplicaSet; kube-controller-manager's ReplicaSet controller creates its pods."""

    def __init__(self, api: KubeApi, ns: str, name: str, template_spec: dict[str, Any]) -> None:
        self.api, self.ns, self.name = api, ns, name
        self.rs = api.create(
            f"/apis/apps/v1/namespaces/{ns}/replicasets",
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {"name": name},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}}, "spec": template_spec},
                },
            },
        )

    def owned_pods(self) -> list[dict[str, Any]]:
        pods = self.api.get(f"/api/v1/namespaces/{self.ns}/pods?labelSelector=app%3D{self.name}")
        uid = self.rs["metadata"]["uid"]
        return [
            p
            for p in pods["items"]
            if any(o["uid"] == uid for o in p["metadata"].get("ownerReferences") or [])
            and not p["metadata"].get("deletionTimestamp")
        ]

    def new_pod(self, *, besides: tuple[str, ...] = ()) -> str:
        """The name of the pod the controller made (one not in `besides`), waiting for it."""

        def made() -> str | None:
            names = [p["metadata"]["name"] for p in self.owned_pods()]
            fresh = [n for n in names if n not in besides]
            return fresh[0] if fresh else None

        name = poll_until(made, timeout_s=60)
        assert name, f"ReplicaSet {self.ns}/{self.name} made no pod"
        return name


def test_a_users_12gi_pod_goes_through_every_component_and_lands(
    gpupool_cluster: E2ECluster,
) -> None:
    api = gpupool_cluster.api
    ns = _namespace(api)
    api.create(
        f"/api/v1/namespaces/{ns}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "infer"},
            "spec": _pod_spec("12Gi"),
        },
    )
    pod = poll_until(lambda: _running(api, ns, "infer"), timeout_s=60)
    assert pod, f"the pod did not run:\n{_logs(gpupool_cluster)}"
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits["gpupool.io/vgpu"] == "1", limits  # the webhook's mutation
    annotations = pod["metadata"]["annotations"]
    assert "gpupool.io/admitted" in annotations  # the controller removed the quota gate
    assert not pod["spec"].get("schedulingGates")
    [alloc] = json.loads(annotations["gpupool.io/allocation"])  # the extender's bind
    assert alloc["sizeBytes"] == 12 * GiB
    lease = _lease(api, pod)
    assert lease["spec"]["node"] == pod["spec"]["nodeName"]
    gpunode = api.get(f"{GPUPOOL_API}/gpunodes/{pod['spec']['nodeName']}")
    assert alloc["uuid"] in {d["uuid"] for d in gpunode["status"]["devices"]}
    assert poll_until(
        lambda: (_lease(api, pod).get("status") or {}).get("phase") == "Active", timeout_s=30
    ), f"lease never Active:\n{_logs(gpupool_cluster)}"


def test_a_node_that_stops_heartbeating_loses_its_leases_and_its_pods_are_replaced(
    gpupool_cluster: E2ECluster,
) -> None:
    c = gpupool_cluster
    api = c.api
    ns = _namespace(api)
    replicaset = _ReplicaSet(api, ns, "infer", _pod_spec("12Gi"))
    first = replicaset.new_pod()
    pod = poll_until(lambda: _running(api, ns, first), timeout_s=60)
    assert pod, f"{first} did not run:\n{_logs(c)}"
    lost_node = pod["spec"]["nodeName"]
    lost_lease = _lease(api, pod)
    api.create(
        f"/api/v1/namespaces/{ns}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "bystander"},
            "spec": _pod_spec("12Gi", avoid_node=lost_node),
        },
    )
    bystander = poll_until(lambda: _running(api, ns, "bystander"), timeout_s=60)
    assert bystander, f"bystander did not run:\n{_logs(c)}"
    assert bystander["spec"]["nodeName"] != lost_node

    gpunode_path = f"{GPUPOOL_API}/gpunodes/{lost_node}"
    _kubectl(c, "annotate", "gpunode", lost_node, f"{PAUSE_ANNOTATION}={PAUSED}")
    try:
        lease_path = f"{GPUPOOL_API}/namespaces/{ns}/gpuleases/{lost_lease['metadata']['name']}"

        def lease_lost() -> dict[str, Any] | None:
            lease = _get(api, lease_path)
            status = (lease or {}).get("status") or {}
            return lease if status.get("phase") == "Lost" else None

        lease = poll_until(lease_lost, timeout_s=90, interval_s=0.5)
        assert lease, f"lease {lease_path} never Lost:\n{_logs(c)}"
        [condition] = [x for x in lease["status"]["conditions"] if x["type"] == "Lost"]
        assert condition["reason"] == "NodeLost"
        assert "no heartbeat" in condition["message"]
        assert lease["status"].get("end"), lease["status"]
        assert api.get(gpunode_path)["status"]["health"] == "Lost"
        assert poll_until(
            lambda: _get(api, f"/api/v1/namespaces/{ns}/pods/{first}") is None, timeout_s=30
        ), f"pod {first} on the lost node was not deleted:\n{_logs(c)}"

        # The pod on a healthy node, and its lease, are untouched.
        still = _running(api, ns, "bystander")
        assert still is not None and still["metadata"]["uid"] == bystander["metadata"]["uid"]
        assert (_lease(api, still).get("status") or {}).get("phase") in ("Bound", "Active")

        # The ReplicaSet's controller replaces the pod; the extender keeps it off the lost node
        # (kwok still reports that Node Ready: only its GpuNode says it is lost).
        replacement = replicaset.new_pod(besides=(first,))
        placed = poll_until(lambda: _running(api, ns, replacement), timeout_s=60)
        assert placed, f"replacement {replacement} did not run:\n{_logs(c)}"
        assert placed["spec"]["nodeName"] != lost_node
        new_lease = _lease(api, placed)
        assert new_lease["spec"]["node"] == placed["spec"]["nodeName"]
        assert new_lease["metadata"]["name"] != lost_lease["metadata"]["name"]
    finally:
        _kubectl(c, "annotate", "gpunode", lost_node, f"{PAUSE_ANNOTATION}-")
    # Heartbeats resume: the node is Healthy again (so the session's other tests have it back).
    assert poll_until(
        lambda: api.get(gpunode_path)["status"]["health"] == "Healthy", timeout_s=60
    ), f"{lost_node} not Healthy after its heartbeat resumed:\n{_logs(c)}"


def test_an_idle_node_renews_its_lease_and_its_gpunode_is_not_written(
    gpupool_cluster: E2ECluster,
) -> None:
    """The heartbeat is the node's Lease (namespace gpupool-node-lease): over several heartbeat
    periods its renewTime advances while the GpuNode is written only for a change of what it
    says (never for a time alone), so nothing that watches GpuNodes wakes for a heartbeat."""
    c = gpupool_cluster
    api = c.api
    healthy = [
        g["metadata"]["name"]
        for g in api.get(f"{GPUPOOL_API}/gpunodes")["items"]
        if (g.get("status") or {}).get("health") == "Healthy"
    ]
    assert healthy, f"no Healthy GpuNode:\n{_logs(c)}"
    node = healthy[0]
    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASE_NAMESPACE}/leases/{node}"
    lease = poll_until(lambda: _get(api, lease_path), timeout_s=30)
    assert lease, f"node {node} has no Lease:\n{_logs(c)}"
    assert lease["spec"]["holderIdentity"] == "gpupool-fake-agent"

    def reported() -> dict[str, Any] | None:
        """The GpuNode once its agent's first reports are in: the path look writes the
        `OtherGpuPath` condition a moment after the GpuNode is made, and that write is not a
        heartbeat."""
        found = _get(api, f"{GPUPOOL_API}/gpunodes/{node}")
        kinds = {x.get("type") for x in ((found or {}).get("status") or {}).get("conditions") or []}
        return found if "OtherGpuPath" in kinds else None

    first = poll_until(reported, timeout_s=30, interval_s=0.25)
    assert first, f"GpuNode {node} never had its OtherGpuPath condition:\n{_logs(c)}"
    version = first["metadata"]["resourceVersion"]
    renewals: set[str] = set()

    def renewed_four_times() -> bool:
        now = _get(api, lease_path)
        renewals.add(((now or {}).get("spec") or {}).get("renewTime") or "")
        return len(renewals - {""}) >= 4

    assert poll_until(renewed_four_times, timeout_s=60, interval_s=0.25), (
        f"Lease {node} renewed only at {sorted(renewals)}:\n{_logs(c)}"
    )
    # The dev cluster is shared with tests placing pods meanwhile, so the GpuNode may be written
    # for a real change; what must not happen is a write that moves only times.
    writes = _gpunode_writes_since(api, node, version)
    assert all(_content(w) != _content(prev) for prev, w in itertools.pairwise([first, *writes])), (
        f"the GpuNode was written with only a time moved: {writes}"
    )
    gpunode = api.get(f"{GPUPOOL_API}/gpunodes/{node}")
    assert "heartbeat" not in gpunode["status"]
    assert gpunode["status"]["health"] == "Healthy"
