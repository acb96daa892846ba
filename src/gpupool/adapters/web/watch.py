"""Watches that tell the web view's `StateSource` to read again: any change to a GpuLease, a
tenant's pod or a GpuQuota. A watch carries no state of its own here (the read after it is the
state), so a broken watch is simply started again; the periodic resync covers the gap."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import httpx2
from lightkube import AsyncClient, operators
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod

from gpupool.adapters.kubernetes.resources import GpuLease, GpuQuota
from gpupool.adapters.wire import names

log = logging.getLogger("gpupool.web")

RETRY_S = 2.0  # before a failed watch starts again


async def _watch(client: AsyncClient, resource: Any, poke: Callable[[], None], **kw: Any) -> None:
    while True:
        try:
            async for _event in client.watch(resource, **kw):
                poke()
        except (ApiError, httpx2.HTTPError, OSError) as err:
            log.debug("watch of %s ended (%s); starting it again", resource.__name__, err)
        await asyncio.sleep(RETRY_S)


async def watch_changes(client: AsyncClient, poke: Callable[[], None]) -> None:
    """Run until cancelled."""
    tenant_pods = {"labels": {names.LABEL_TENANT: operators.exists()}}
    await asyncio.gather(
        _watch(client, GpuLease, poke, namespace="*"),
        _watch(client, Pod, poke, namespace="*", **tenant_pods),
        _watch(client, GpuQuota, poke),
    )
