"""The extender's bind writes over FastPoster (aiohttp) against the real kube-apiserver: the
GpuLease create and its conflict, the Binding with annotations, and errors with their messages.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from support.builders import pod_json

from gpupool.adapters.extender_http.k8s_api import LightkubeExtenderApi
from gpupool.adapters.extender_http.service import LeaseExists
from gpupool.adapters.kubeclient import async_client
from gpupool.adapters.kubernetes.crds import apply_crds
from gpupool.adapters.kubernetes.fast_post import ApiStatusError, FastPoster
from gpupool.domain.allocations import Slice
from gpupool.domain.units import GiB
from gpupool.state.lease import LeaseRecord, PodRef

if TYPE_CHECKING:
    from conftest import E2ECluster

pytestmark = pytest.mark.e2e


def _lease(ns: str, pod: dict[str, Any], node: str) -> LeaseRecord:
    meta = pod["metadata"]
    return LeaseRecord(
        name=meta["uid"],
        namespace=ns,
        tenant="default",
        pod=PodRef(ns, meta["name"], meta["uid"]),
        node=node,
        slices=(
            Slice(
                gpu_index=0,
                uuid="GPU-fast-post-0",
                model="A100-80GB",
                offset_bytes=0,
                size_bytes=12 * GiB,
                compute_milli=300,
            ),
        ),
        amount=12 * GiB,
    )


async def _run(kubeconfig: Path, ns: str, pod: dict[str, Any], node: str) -> None:
    client = async_client(kubeconfig)
    await apply_crds(client)
    poster = FastPoster.from_kubeconfig(kubeconfig)
    api = LightkubeExtenderApi(client, poster)
    try:
        lease = _lease(ns, pod, node)
        created = await api.create_lease(lease)
        assert created.resource_version, "the API server's copy comes back decoded"
        assert created.slices[0].size_bytes == 12 * GiB
        assert (created.node, created.pod.uid) == (node, pod["metadata"]["uid"])
        with pytest.raises(LeaseExists):
            await api.create_lease(lease)

        # A Binding to a pod that does not exist: the API server's message, not a crash.
        with pytest.raises(ApiStatusError) as missing:
            await api.bind_pod(ns, "no-such-pod", "0000", node)
        assert missing.value.code == 404
        assert "no-such-pod" in missing.value.message
    finally:
        await poster.close()


def test_fast_post_creates_lease_and_binds(dev_cluster: E2ECluster, namespace: str) -> None:
    api = dev_cluster.api
    node = api.get("/api/v1/nodes")["items"][0]["metadata"]["name"]
    body = pod_json("fast", namespace=namespace, scheduler_name="nobody")  # this test binds it
    pod = api.create(f"/api/v1/namespaces/{namespace}/pods", body)
    asyncio.run(_run(dev_cluster.kubeconfig, namespace, pod, node))

    async def bind() -> None:
        poster = FastPoster.from_kubeconfig(dev_cluster.kubeconfig)
        ext = LightkubeExtenderApi(async_client(dev_cluster.kubeconfig), poster)
        try:
            await ext.bind_pod(
                namespace, "fast", pod["metadata"]["uid"], node, {"gpupool.io/test": "yes"}
            )
        finally:
            await poster.close()

    asyncio.run(bind())
    bound = api.get(f"/api/v1/namespaces/{namespace}/pods/fast")
    assert bound["spec"]["nodeName"] == node
    assert bound["metadata"]["annotations"]["gpupool.io/test"] == "yes"
