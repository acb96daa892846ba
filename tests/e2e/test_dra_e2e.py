"""The DRA driver's node side against the real control plane: the ResourceSlice the agent would
publish, the DeviceClass from deploy/dra, claims the real kube-scheduler allocates on them with
consumable capacity, and the plugin's preparer reading those claims from the API server.

No kubelet calls NodePrepareResources here (the nodes are kwok's): the test calls the preparer the
plugin's gRPC servicer calls (the servicer itself: tests/contract/test_dra_plugin_contract.py).
It skips where the API server runs without consumable capacity (DRAConsumableCapacity: alpha in
Kubernetes 1.34, beta and on by default from 1.36), since the server then drops
`allowMultipleAllocations` and every claim takes a whole card.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from support.waiting import wait_until

from gpupool.adapters.kubeclient import async_client
from gpupool.adapters.wire.names import DRA_DRIVER
from gpupool.domain.devices import Gpu
from gpupool.domain.units import GiB
from gpupool.node.device_plugin.decide import PluginPaths
from gpupool.node.dra.checkpoint import CheckpointStore
from gpupool.node.dra.claims import CardOffer, ClaimRef, check_claim_spec
from gpupool.node.dra.errors import MemoryAboveEveryCard
from gpupool.node.dra.kube import KubernetesClaimSource, ResourceSlicePublisher
from gpupool.node.dra.prepare import ClaimPreparer, PrepareSettings
from gpupool.node.dra.slices import SliceSettings, memory_limit, slice_name
from gpupool.node.nvml import FakeInventory

if TYPE_CHECKING:
    from conftest import E2ECluster

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
RESOURCE = "/apis/resource.k8s.io/v1"
BOUND = 60.0  # seconds: a hang guard, not a speed claim


def _template(namespace: str, name: str, requests: dict[str, str]) -> dict[str, Any]:
    model = f"device.attributes['{DRA_DRIVER}'].model == 'A100-80GB'"
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {
                                "deviceClassName": DRA_DRIVER,
                                "selectors": [{"cel": {"expression": model}}],
                                "capacity": {"requests": requests},
                            },
                        }
                    ]
                }
            }
        },
    }


def _pod(namespace: str, name: str, node: str, template: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"operator": "Exists"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}
            ],
        },
    }


def test_claims_allocated_by_the_real_scheduler_are_prepared_with_their_limits(
    dev_cluster: E2ECluster, namespace: str, tmp_path: Path
) -> None:
    api = dev_cluster.api
    if not api.exists(f"{RESOURCE}/deviceclasses"):
        pytest.skip("the API server does not serve resource.k8s.io/v1 (Kubernetes 1.34+)")
    node = dev_cluster.state.nodes[0]
    gpus = tuple(Gpu(index=i, model="A100-80GB", uuid=f"GPU-dra-e2e-{i}") for i in range(2))
    if not api.exists(f"{RESOURCE}/deviceclasses/{DRA_DRIVER}"):
        device_class = yaml.safe_load((REPO / "deploy/dra/deviceclass.yaml").read_text())
        api.create(f"{RESOURCE}/deviceclasses", device_class)

    async def publish() -> tuple[int, int, bool | None]:
        client = async_client(dev_cluster.kubeconfig)
        try:
            publisher = ResourceSlicePublisher(client, SliceSettings(node, 10, shares_per_card=4))
            first = await publisher.publish(gpus)
            return first, await publisher.publish(gpus), publisher.consumable
        finally:
            await client.close()

    first, second, consumable = asyncio.run(publish())
    assert (first, second) == (1, 1)  # a second publish of the same cards changes nothing
    published = api.get(f"{RESOURCE}/resourceslices/{slice_name(node)}")["spec"]
    assert consumable == bool(published["devices"][0].get("allowMultipleAllocations"))
    if not consumable:
        pytest.skip(
            "the API server dropped allowMultipleAllocations: it runs without "
            "DRAConsumableCapacity (on by default from Kubernetes 1.36)"
        )
    assert [d["name"] for d in published["devices"]] == ["gpu-0", "gpu-1"]
    assert published["devices"][0]["capacity"]["shares"]["value"] == "4"

    templates = f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates"
    api.create(templates, _template(namespace, "small", {"memory": "12Gi", "compute": "30"}))
    api.create(templates, _template(namespace, "huge", {"memory": "100Gi"}))
    for name, template in (("a", "small"), ("b", "small"), ("big", "huge")):
        api.create(f"/api/v1/namespaces/{namespace}/pods", _pod(namespace, name, node, template))

    def placed() -> dict[str, dict[str, Any]] | None:
        pods = api.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
        by_name = {p["metadata"]["name"]: p for p in pods}
        return by_name if all(by_name[n]["spec"].get("nodeName") for n in ("a", "b")) else None

    wait_until(placed, BOUND, "pods a and b to be scheduled on their claims")

    def big_refused() -> str | None:
        pod = api.get(f"/api/v1/namespaces/{namespace}/pods/big")
        conds = pod["status"].get("conditions", [])
        return next((c["message"] for c in conds if c["type"] == "PodScheduled"), None)

    assert "cannot allocate all claims" in wait_until(big_refused, BOUND, "pod big to be refused")
    huge = api.get(f"{templates}/huge")["spec"]["spec"]
    with pytest.raises(MemoryAboveEveryCard, match=r"asks for 100Gi .* largest card gives 72Gi"):
        check_claim_spec(huge, [CardOffer("A100-80GB", memory_limit(gpus[0], 10))])

    claims = [
        c
        for c in api.get(f"{RESOURCE}/namespaces/{namespace}/resourceclaims")["items"]
        if (c.get("status") or {}).get("allocation")
    ]
    assert len(claims) == 2
    for claim in claims:
        [allocated] = claim["status"]["allocation"]["devices"]["results"]
        assert (allocated["driver"], allocated["pool"]) == (DRA_DRIVER, node)
        assert allocated["consumedCapacity"] == {"memory": "12Gi", "compute": "30", "shares": "1"}

    async def prepare() -> dict[str, str]:
        client = async_client(dev_cluster.kubeconfig)
        settings = PrepareSettings(
            node=node,
            reserve_pct=10,
            paths=PluginPaths(
                limits_host_dir=str(tmp_path / "limits"), usage_host_dir=str(tmp_path / "usage")
            ),
            cdi_dir=str(tmp_path / "cdi"),
        )
        preparer = ClaimPreparer(
            settings, FakeInventory(gpus), KubernetesClaimSource(client), CheckpointStore(tmp_path)
        )
        try:
            out = {}
            for claim in claims:
                meta = claim["metadata"]
                done = await preparer.prepare(
                    ClaimRef(meta["namespace"], meta["name"], meta["uid"])
                )
                out[meta["name"]] = done.limits_text
            return out
        finally:
            await client.close()

    uuid_of = {f"gpu-{g.index}": g.uuid for g in gpus}
    expected = {
        c["metadata"]["name"]: (
            f"{uuid_of[c['status']['allocation']['devices']['results'][0]['device']]} "
            f"{12 * GiB} 30\n"
        )
        for c in claims
    }
    assert asyncio.run(prepare()) == expected
