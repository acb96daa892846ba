"""Dynamic Resource Allocation on the dev cluster, with no driver: what a later DRA driver needs
of the control plane. `resource.k8s.io/v1` is served, and consumable capacity (KEP-5075, the
DRAConsumableCapacity gate) works end to end: a device that allows several allocations and
declares 80Gi of memory is shared by two claims of 40Gi each, placed by kube-scheduler's own
allocator, and a third claim of 40Gi does not fit. The ResourceSlice is published here by hand,
as a driver's kubelet plugin would publish it for a kwok node.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from gpupool.devcluster.polling import poll_until

if TYPE_CHECKING:
    from conftest import E2ECluster

pytestmark = pytest.mark.e2e

RESOURCE_API = "/apis/resource.k8s.io/v1"
DRIVER = "e2e-gpu.gpupool.dev"


@pytest.fixture
def shared_card(dev_cluster: E2ECluster) -> Iterator[str]:
    """A DeviceClass for DRIVER and one ResourceSlice on the first kwok node: one card of 80Gi
    that several claims may each take part of. Removed afterwards (the cluster is shared)."""
    api = dev_cluster.api
    node = sorted(dev_cluster.state.nodes)[0]
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
    }
    card = {
        "name": "card0",
        "allowMultipleAllocations": True,
        "capacity": {
            "memory": {
                "value": "80Gi",
                "requestPolicy": {"default": "1Gi", "validRange": {"min": "1Gi"}},
            }
        },
    }
    resource_slice = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [card],
        },
    }
    api.create(f"{RESOURCE_API}/deviceclasses", device_class)
    created = api.create(f"{RESOURCE_API}/resourceslices", resource_slice)
    try:
        # The apiserver drops the consumable-capacity fields when the gate is off.
        [kept] = created["spec"]["devices"]
        assert kept.get("allowMultipleAllocations") is True, kept
        assert kept["capacity"]["memory"].get("requestPolicy"), kept
        yield node
    finally:
        api.delete(f"{RESOURCE_API}/resourceslices/{node}-{DRIVER}")
        api.delete(f"{RESOURCE_API}/deviceclasses/{DRIVER}")


def _claim(name: str, memory: str) -> dict[str, Any]:
    request = {"deviceClassName": DRIVER, "capacity": {"requests": {"memory": memory}}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
    }


def _pod(name: str, claim: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}
            ],
        },
    }


def test_two_claims_share_one_device_by_its_capacity(
    dev_cluster: E2ECluster, namespace: str, shared_card: str
) -> None:
    api = dev_cluster.api
    claims = f"{RESOURCE_API}/namespaces/{namespace}/resourceclaims"
    pods = f"/api/v1/namespaces/{namespace}/pods"
    for name in ("half-a", "half-b", "one-too-many"):
        api.create(claims, _claim(name, "40Gi"))

    def allocated(name: str) -> dict[str, Any] | None:
        allocation = (api.get(f"{claims}/{name}").get("status") or {}).get("allocation")
        return allocation if isinstance(allocation, dict) else None

    results = []
    # One pod after the other: created together, the second's first attempt can meet the
    # first's allocation in flight, and kube-scheduler then waits for a requeue event (in the
    # full suite on two workers it once waited past the minute).
    for name in ("half-a", "half-b"):
        api.create(pods, _pod(name, name))
        allocation = poll_until(lambda n=name: allocated(n), timeout_s=60, interval_s=0.5)
        assert allocation, f"claim {name} was never allocated: {api.get(f'{claims}/{name}')}"
        [result] = allocation["devices"]["results"]
        results.append(result)
        pod = api.get(f"{pods}/{name}")
        assert pod["spec"].get("nodeName") == shared_card, pod["spec"]
    # the same card, each with its own share and its own 40Gi of the card's memory
    assert {(r["driver"], r["pool"], r["device"]) for r in results} == {
        (DRIVER, shared_card, "card0")
    }
    assert all(r["consumedCapacity"] == {"memory": "40Gi"} for r in results), results
    assert results[0]["shareID"] != results[1]["shareID"], results

    # 80Gi are taken: a third 40Gi claim finds no room, and its pod stays unscheduled
    api.create(pods, _pod("one-too-many", "one-too-many"))

    def unschedulable() -> bool:
        conditions = api.get(f"{pods}/one-too-many").get("status", {}).get("conditions") or []
        return any(
            c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions
        )

    assert poll_until(unschedulable, timeout_s=60, interval_s=0.5), api.get(f"{pods}/one-too-many")
    assert allocated("one-too-many") is None
