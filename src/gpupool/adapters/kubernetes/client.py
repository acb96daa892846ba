"""A lightkube AsyncClient from a kubeconfig file (or the in-cluster service account)."""

from __future__ import annotations

from pathlib import Path

import httpx2
from lightkube import AsyncClient, KubeConfig


def make_client(
    kubeconfig: Path | None = None, *, field_manager: str = "gpupool", timeout_s: float = 10.0
) -> AsyncClient:
    """A client that ignores proxy variables (the API server is usually on a private network)."""
    config = KubeConfig.from_file(str(kubeconfig)) if kubeconfig else KubeConfig.from_env()
    return AsyncClient(
        config,
        field_manager=field_manager,
        trust_env=False,
        timeout=httpx2.Timeout(timeout_s),
    )
