"""The extender's bind writes against the real kube-apiserver, through both writers
`bind_poster` may pick (FastPoster over aiohttp; LightkubePoster over lightkube's connection, for
credentials FastPoster does not do): the GpuLease create and its conflict, the Binding with
annotations, and errors as the same typed kinds with the API server's messages.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from lightkube import AsyncClient
from support.builders import pod_json

from gpupool.adapters.extender_http.k8s_api import LightkubeExtenderApi
from gpupool.adapters.kubeclient import async_client, kube_config
from gpupool.adapters.kubernetes.crds import apply_crds
from gpupool.adapters.kubernetes.errors import Conflict, NotFound
from gpupool.adapters.kubernetes.fast_post import FastPoster, LightkubePoster, Poster
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


def _poster(writer: str, kubeconfig: Path, client: AsyncClient) -> Poster:
    if writer == "aiohttp":
        return FastPoster.from_config(kube_config(kubeconfig))
    return LightkubePoster(client)


WRITERS = pytest.mark.parametrize("writer", ["aiohttp", "lightkube"])


async def _run(kubeconfig: Path, ns: str, pod: dict[str, Any], node: str, writer: str) -> None:
    client = async_client(kubeconfig)
    await apply_crds(client)
    poster = _poster(writer, kubeconfig, client)
    api = LightkubeExtenderApi(client, poster)
    try:
        lease = _lease(ns, pod, node)
        created = await api.create_lease(lease)
        assert created.resource_version, "the API server's copy comes back decoded"
        assert created.slices[0].size_bytes == 12 * GiB
        assert (created.node, created.pod.uid) == (node, pod["metadata"]["uid"])
        with pytest.raises(Conflict):
            await api.create_lease(lease)

        # A Binding to a pod that does not exist: the API server's message, not a crash.
        with pytest.raises(NotFound) as missing:
            await api.bind_pod(ns, "no-such-pod", "0000", node)
        assert missing.value.code == 404
        assert "no-such-pod" in missing.value.message
    finally:
        await poster.close()


@WRITERS
def test_bind_writes_create_lease_and_bind(
    dev_cluster: E2ECluster, namespace: str, writer: str
) -> None:
    api = dev_cluster.api
    node = api.get("/api/v1/nodes")["items"][0]["metadata"]["name"]
    body = pod_json("fast", namespace=namespace, scheduler_name="nobody")  # this test binds it
    pod = api.create(f"/api/v1/namespaces/{namespace}/pods", body)
    asyncio.run(_run(dev_cluster.kubeconfig, namespace, pod, node, writer))

    async def bind() -> None:
        client = async_client(dev_cluster.kubeconfig)
        poster = _poster(writer, dev_cluster.kubeconfig, client)
        ext = LightkubeExtenderApi(client, poster)
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
