"""One lightkube AsyncClient: from a kubeconfig file (dev cluster, tests), else the usual search
(in-cluster service account, $KUBECONFIG, ~/.kube/config)."""

from __future__ import annotations

from pathlib import Path

import httpx2
from lightkube import AsyncClient
from lightkube.config.kubeconfig import KubeConfig


def async_client(
    kubeconfig: Path | None = None, *, field_manager: str, timeout_s: float = 10.0
) -> AsyncClient:
    if kubeconfig is not None:
        # A named file is a dev or test cluster on loopback: ignore proxy variables.
        return AsyncClient(
            KubeConfig.from_file(kubeconfig),
            field_manager=field_manager,
            trust_env=False,
            timeout=httpx2.Timeout(timeout_s),
        )
    return AsyncClient(field_manager=field_manager, timeout=httpx2.Timeout(timeout_s))
