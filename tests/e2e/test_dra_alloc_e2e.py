"""Claims on gpu.gpupool.io governed and placed by gpupool, on the full dev cluster (issue 26,
items 3-4): a pod asking for 12Gi through a ResourceClaimTemplate in a tenant namespace is gated
by the webhook, admitted against its tenant's GpuQuota, its claim allocated by gpupool's
controller to the card its placement core chose (the GpuLease records it), and kube-scheduler
binds it where that allocation says; a second such pod over the quota waits gated with its queue
position; deleting the first ends its lease, metered, and the second goes in its place. A claim
larger than any card is refused at creation with the fix.

The slices stand in for `gpupool agent --dra` on two of the kwok nodes (the cards their GpuNodes
report). The controller's claim rights are what the chart's `dra.enabled` grants. Skips where
the API server drops consumable capacity (DRAConsumableCapacity: alpha in 1.34, run with the
wrappers of `$GPUPOOL_K8S_BIN`; on by default from 1.36).
"""

from __future__ import annotations

import asyncio
import json
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from support.waiting import wait_until

from gpupool.adapters.kubeclient import async_client
from gpupool.adapters.wire import names
from gpupool.adapters.wire.names import DRA_DRIVER
from gpupool.devcluster.apiclient import ApiError
from gpupool.domain.devices import Gpu
from gpupool.domain.units import GiB
from gpupool.node.dra.kube import ResourceSlicePublisher
from gpupool.node.dra.slices import SliceSettings, slice_name

if TYPE_CHECKING:
    from conftest import E2ECluster

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
RESOURCE = "/apis/resource.k8s.io/v1"
GPUPOOL_API = "/apis/gpupool.io/v1alpha1"
BOUND = 90.0  # seconds: a hang guard, not a speed claim

# What the chart grants the controller with dra.enabled (templates/rbac/controller.yaml).
CLAIM_RULES = [
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/status"],
     "verbs": ["patch"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/binding"],
     "verbs": ["patch"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": ["list"]},
]  # fmt: skip


def _grant_claims(api: Any) -> None:
    name = "gpupool-controller-dra"
    if api.exists(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}"):
        return
    api.create("/apis/rbac.authorization.k8s.io/v1/clusterroles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name}, "rules": CLAIM_RULES})  # fmt: skip
    api.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": "gpupool-controller",
                      "namespace": "gpupool-system"}]})  # fmt: skip


def _tenant(api: Any, nominal: str) -> str:
    tenant = f"dra-{secrets.token_hex(3)}"
    api.create(f"{GPUPOOL_API}/gpuquotas", {
        "apiVersion": "gpupool.io/v1alpha1", "kind": "GpuQuota",
        "metadata": {"name": tenant}, "spec": {"nominal": nominal}})  # fmt: skip
    api.create("/api/v1/namespaces", {
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": tenant, "labels": {names.LABEL_TENANT: tenant}}})  # fmt: skip
    return tenant


def _template(namespace: str, name: str, memory: str) -> dict[str, Any]:
    model = f"device.attributes['{DRA_DRIVER}'].model == 'A100-80GB'"
    request = {"deviceClassName": DRA_DRIVER, "selectors": [{"cel": {"expression": model}}],
               "capacity": {"requests": {"memory": memory, "compute": "30"}}}  # fmt: skip
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}},
    }  # fmt: skip


def _pod(namespace: str, name: str, template: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "tolerations": [{"operator": "Exists"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
            "containers": [{"name": "c", "image": "registry.example/infer:1",
                            "resources": {"claims": [{"name": "gpu"}]}}],
        },
    }  # fmt: skip


def _publish(cluster: E2ECluster, nodes: list[str]) -> bool | None:
    """Each node's slice of the cards its GpuNode reports; whether the server kept sharing."""

    async def run() -> bool | None:
        client = async_client(cluster.kubeconfig)
        consumable: bool | None = None
        try:
            for node in nodes:
                status = cluster.api.get(f"{GPUPOOL_API}/gpunodes/{node}")["status"]
                gpus = tuple(Gpu(index=int(d["index"]), model=str(d["model"]), uuid=str(d["uuid"]))
                             for d in status["devices"])  # fmt: skip
                publisher = ResourceSlicePublisher(client, SliceSettings(node, 10))
                await publisher.publish(gpus)
                consumable = publisher.consumable
        finally:
            await client.close()
        return consumable

    return asyncio.run(run())


def test_a_claim_pod_is_gated_admitted_placed_by_gpupool_leased_and_metered(
    gpupool_cluster: E2ECluster,
) -> None:
    api = gpupool_cluster.api
    if not api.exists(f"{RESOURCE}/deviceclasses"):
        pytest.skip("the API server does not serve resource.k8s.io/v1 (Kubernetes 1.34+)")
    if not api.exists(f"{RESOURCE}/deviceclasses/{DRA_DRIVER}"):
        api.create(f"{RESOURCE}/deviceclasses",
                   yaml.safe_load((REPO / "deploy/dra/deviceclass.yaml").read_text()))  # fmt: skip
    nodes = list(gpupool_cluster.state.nodes[:2])
    wait_until(lambda: all(api.exists(f"{GPUPOOL_API}/gpunodes/{n}") for n in nodes), BOUND,
               "the GpuNodes of the two DRA nodes")  # fmt: skip
    if not _publish(gpupool_cluster, nodes):
        pytest.skip("the API server dropped allowMultipleAllocations: it runs without "
                    "DRAConsumableCapacity (on by default from Kubernetes 1.36)")  # fmt: skip
    assert api.exists(f"{RESOURCE}/resourceslices/{slice_name(nodes[0])}")
    _grant_claims(api)
    ns = _tenant(api, "12Gi")
    api.create(f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates", _template(ns, "t12", "12Gi"))
    api.create(f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates", _template(ns, "t100", "100Gi"))

    # a claim larger than any card: refused at creation, naming the fix
    with pytest.raises(ApiError, match="ask for at most 72Gi"):
        api.create(f"/api/v1/namespaces/{ns}/pods", _pod(ns, "huge", "t100"))

    pods = f"/api/v1/namespaces/{ns}/pods"
    api.create(pods, _pod(ns, "a", "t12"))
    made = api.get(f"{pods}/a")
    assert {"name": names.QUOTA_GATE} in (made["spec"].get("schedulingGates") or []) or made[
        "metadata"
    ]["annotations"].get(names.ANN_ADMITTED)  # gated at creation (or admitted already)
    assert json.loads(made["metadata"]["annotations"][names.ANN_CLAIM])["memory"] == 12 * GiB

    def running(name: str) -> dict[str, Any] | None:
        pod: dict[str, Any] = api.get(f"{pods}/{name}")
        return pod if pod["status"].get("phase") == "Running" else None

    a = wait_until(lambda: running("a"), BOUND, "pod a to run on its gpupool-allocated claim")
    uid = a["metadata"]["uid"]
    lease = api.get(f"{GPUPOOL_API}/namespaces/{ns}/gpuleases/{uid}")
    [device] = lease["spec"]["devices"]
    assert lease["spec"]["amount"] == 12 * GiB and device["sizeBytes"] == 12 * GiB
    claim_name = a["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    claim = api.get(f"{RESOURCE}/namespaces/{ns}/resourceclaims/{claim_name}")
    [result] = claim["status"]["allocation"]["devices"]["results"]
    # the card the placement core chose (the lease's) is the claim's, and the pod runs there
    assert (result["pool"], result["device"]) == (lease["spec"]["node"], f"gpu-{device['index']}")
    assert result["consumedCapacity"]["memory"] in (str(12 * GiB), "12Gi")
    assert a["spec"]["nodeName"] == lease["spec"]["node"] and a["spec"]["nodeName"] in nodes
    assert [r.get("uid") for r in claim["status"].get("reservedFor", [])] == [uid]

    # over the quota: the second claim pod waits gated, told where it stands
    api.create(pods, _pod(ns, "b", "t12"))

    def queued() -> str | None:
        pod = api.get(f"{pods}/b")
        note = (pod["metadata"].get("annotations") or {}).get(names.ANN_QUEUE)
        return note if note and "position 1 of 1" in note else None

    wait_until(queued, BOUND, "pod b to wait in its tenant's queue")
    assert {"name": names.QUOTA_GATE} in api.get(f"{pods}/b")["spec"]["schedulingGates"]

    # the first pod gone: its lease ends, metered; the second takes its place
    api.delete(f"{pods}/a")

    def ended() -> dict[str, Any] | None:
        status = api.get(f"{GPUPOOL_API}/namespaces/{ns}/gpuleases/{uid}").get("status") or {}
        return status if status.get("phase") == "Released" else None

    status = wait_until(ended, BOUND, "pod a's lease to be Released")
    assert float(status.get("gibHours", 0)) > 0
    wait_until(lambda: running("b"), BOUND, "pod b to run once a's quota came back")
