"""The one way gpupool connects to the API server: `kube_config` resolves where and as whom (a
kubeconfig file, else the usual search: the in-cluster service account, $KUBECONFIG,
~/.kube/config); `async_client` builds the lightkube client every component uses, and
`fast_post.bind_poster` builds the extender's bind writer from the same resolved config.

Proxy variables (HTTPS_PROXY, ...) are never used for the API server: it is on a private
network or loopback, and both HTTP paths (lightkube's httpx, the bind writer's aiohttp) must
reach it the same way. A proxy the kubeconfig itself names (`proxy-url`) is not supported.
"""

from __future__ import annotations

from pathlib import Path

import httpx2
from lightkube import AsyncClient
from lightkube.config.kubeconfig import KubeConfig, SingleConfig

from gpupool.adapters.kubernetes.errors import KubeconfigError


def kube_config(kubeconfig: Path | None = None) -> SingleConfig:
    """The current context of `kubeconfig`, or of the usual search when None."""
    config = KubeConfig.from_file(str(kubeconfig)) if kubeconfig else KubeConfig.from_env()
    single = config.get()
    if single is None:
        where = kubeconfig or "the in-cluster service account or $KUBECONFIG"
        raise KubeconfigError(f"{where} names no current context; set current-context")
    return single


def async_client(
    kubeconfig: Path | SingleConfig | None = None,
    *,
    field_manager: str = "gpupool",
    timeout_s: float = 10.0,
) -> AsyncClient:
    config = kubeconfig if isinstance(kubeconfig, SingleConfig) else kube_config(kubeconfig)
    return AsyncClient(
        config, field_manager=field_manager, trust_env=False, timeout=httpx2.Timeout(timeout_s)
    )
