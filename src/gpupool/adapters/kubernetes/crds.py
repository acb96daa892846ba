"""Read gpupool's CRD manifests (deploy/crds/*.yaml) and apply them with server-side apply."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import yaml
from lightkube import AsyncClient
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition

from gpupool.adapters.kubernetes.errors import CrdFileError


def default_crd_dir() -> Path:
    """deploy/crds of the source tree this package runs from."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / "deploy" / "crds"
        if candidate.is_dir():
            return candidate
    raise CrdFileError(
        f"no deploy/crds folder above {here}; pass the folder with gpupool's CRD manifests"
    )


def load_crds(folder: Path | None = None) -> list[dict[str, Any]]:
    folder = folder or default_crd_dir()
    crds: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.yaml")):
        try:
            docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        except (OSError, yaml.YAMLError) as err:
            raise CrdFileError(f"{path}: {err}") from None
        for doc in docs:
            if doc.get("kind") != "CustomResourceDefinition":
                raise CrdFileError(f"{path}: not a CustomResourceDefinition: {doc.get('kind')!r}")
            crds.append(doc)
    if not crds:
        raise CrdFileError(f"{folder}: no CRD manifests (*.yaml)")
    return crds


async def apply_crds(
    client: AsyncClient, folder: Path | None = None, *, timeout_s: float = 30.0
) -> list[str]:
    """Apply every CRD and wait until each is Established; return their names."""
    names = []
    for doc in load_crds(folder):
        crd = cast(CustomResourceDefinition, CustomResourceDefinition.from_dict(doc))
        await client.apply(crd, field_manager="gpupool", force=True)
        names.append(doc["metadata"]["name"])

    async def established(name: str) -> None:
        while True:
            crd = await client.get(CustomResourceDefinition, name)
            conditions = (crd.status.conditions if crd.status else None) or []
            if any(c.type == "Established" and c.status == "True" for c in conditions):
                return
            await asyncio.sleep(0.2)

    await asyncio.wait_for(asyncio.gather(*(established(n) for n in names)), timeout_s)
    return names
