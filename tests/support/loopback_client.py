"""A lightkube client for a stand-in API server on the loopback (plain HTTP, a bearer token)."""

from __future__ import annotations

from lightkube import AsyncClient
from lightkube.config.kubeconfig import KubeConfig

from gpupool.adapters.kubeclient import async_client


def loopback_client(port: int) -> AsyncClient:
    config = KubeConfig.from_dict({
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }).get()  # fmt: skip
    return async_client(config)
