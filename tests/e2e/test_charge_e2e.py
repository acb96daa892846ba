"""A pod is charged for what it holds, end to end on the full gpupool dev cluster (issue 27):
`gpupool.io/gpu: 8` with `gpupool.io/gpu-memory: 1Gi` is 1Gi on each of 8 cards, and its
tenant's quota shows 8Gi; eight whole cards (576Gi) are over a 24Gi quota and wait.
"""

from __future__ import annotations

import json
import secrets
from typing import TYPE_CHECKING, Any

import pytest

from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.polling import poll_until
from gpupool.domain.units import GiB

if TYPE_CHECKING:
    from conftest import E2ECluster

pytestmark = pytest.mark.e2e

GPUPOOL_API = "/apis/gpupool.io/v1alpha1"


def _tenant(api: KubeApi, nominal: str) -> tuple[str, str]:
    """A tenant with a GpuQuota of `nominal` and a namespace of its own."""
    tenant = f"team-{secrets.token_hex(3)}"
    api.create(
        f"{GPUPOOL_API}/gpuquotas",
        {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": "GpuQuota",
            "metadata": {"name": tenant},
            "spec": {"nominal": nominal},
        },
    )
    api.create(
        "/api/v1/namespaces",
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": tenant, "labels": {"gpupool.io/tenant": tenant}},
        },
    )
    return tenant, tenant


def _create(api: KubeApi, ns: str, name: str, limits: dict[str, str]) -> None:
    api.create(
        f"/api/v1/namespaces/{ns}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "containers": [
                    {"name": "main", "image": "registry.example/train:1",
                     "resources": {"limits": limits}}
                ]
            },
        },
    )  # fmt: skip


def _pod(api: KubeApi, ns: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = api.get(f"/api/v1/namespaces/{ns}/pods/{name}")
    return found


def _running(api: KubeApi, ns: str, name: str) -> dict[str, Any] | None:
    pod = _pod(api, ns, name)
    return pod if pod["status"].get("phase") == "Running" else None


def _quota_used(api: KubeApi, tenant: str) -> int | None:
    status = api.get(f"{GPUPOOL_API}/gpuquotas/{tenant}").get("status") or {}
    used = status.get("usedAmount")
    return int(used) if used is not None else None


def test_eight_slices_of_one_gib_hold_one_gib_on_each_of_eight_cards(
    gpupool_cluster: E2ECluster,
) -> None:
    api = gpupool_cluster.api
    tenant, ns = _tenant(api, "24Gi")
    _create(api, ns, "eight", {"gpupool.io/gpu": "8", "gpupool.io/gpu-memory": "1Gi"})
    pod = poll_until(lambda: _running(api, ns, "eight"), timeout_s=90)
    assert pod, f"the pod did not run: {_pod(api, ns, 'eight')['status']}"
    annotations = pod["metadata"]["annotations"]
    slices = json.loads(annotations["gpupool.io/allocation"])
    assert [s["sizeBytes"] for s in slices] == [GiB] * 8
    assert len({s["uuid"] for s in slices}) == 8  # eight distinct cards
    lease_ns, uid = annotations["gpupool.io/lease"].split("/")
    # the extender creates the lease after the Binding, in the background: wait for it
    lease = poll_until(
        lambda: api.find(f"{GPUPOOL_API}/namespaces/{lease_ns}/gpuleases/{uid}"), timeout_s=30
    )
    assert lease, f"no GpuLease {lease_ns}/{uid}"
    assert (lease["spec"]["resource"], int(lease["spec"]["amount"])) == ("gpu-memory", 8 * GiB)
    assert sum(int(d["sizeBytes"]) for d in lease["spec"]["devices"]) == 8 * GiB
    assert poll_until(lambda: _quota_used(api, tenant) == 8 * GiB, timeout_s=30), (
        f"the quota shows {_quota_used(api, tenant)} used, not 8Gi"
    )
    # the slices are cards of the node the pod runs on
    node = pod["spec"]["nodeName"]
    gpunode = api.get(f"{GPUPOOL_API}/gpunodes/{node}")
    assert {s["uuid"] for s in slices} <= {d["uuid"] for d in gpunode["status"]["devices"]}

    # eight whole cards (8 x 72Gi) are far over what is left of 24Gi: the pod waits, gated
    _create(api, ns, "whole", {"gpupool.io/gpu": "8"})

    def waiting() -> str | None:
        got = _pod(api, ns, "whole")
        gates = [g["name"] for g in got["spec"].get("schedulingGates") or []]
        note = (got["metadata"].get("annotations") or {}).get("gpupool.io/queue")
        return note if "gpupool.io/quota" in gates and note else None

    note = poll_until(waiting, timeout_s=30)
    assert note and "24Gi" in note, note
    assert _quota_used(api, tenant) == 8 * GiB
