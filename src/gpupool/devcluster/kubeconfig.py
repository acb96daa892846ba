"""Kubeconfig files for the dev cluster's users (admin for people and tests, the scheduler)."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import yaml

CONTEXT = "gpupool-dev"


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


def render_kubeconfig(server: str, ca: Path, cert: Path, key: Path, user: str) -> str:
    """A kubeconfig with the certificates embedded, so the file works when copied elsewhere."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CONTEXT,
                "cluster": {"server": server, "certificate-authority-data": _b64(ca)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {"client-certificate-data": _b64(cert), "client-key-data": _b64(key)},
            }
        ],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": user}}],
        "current-context": CONTEXT,
        "preferences": {},
    }
    return yaml.safe_dump(config, sort_keys=False)


def write_kubeconfig(path: Path, server: str, ca: Path, cert: Path, key: Path, user: str) -> Path:
    """Write the kubeconfig readable by its owner only (it holds a private key)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(render_kubeconfig(server, ca, cert, key, user))
    return path
