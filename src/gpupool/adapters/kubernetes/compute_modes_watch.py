"""The extender's view of the compute-modes ConfigMap (`--compute-modes NS/NAME`, by default
`gpupool-system/gpupool-compute-modes`): read every `interval_s`, decoded whole
(`adapters.wire.compute_modes`), its last good settings handed to bind (`current`).

- absent: the built-in defaults (no MPS unless a pod asks); operators create it to set any;
- readable: its settings replace the last ones at once, for the next bind;
- unreadable (a key or value that does not parse): nothing of it is applied; the last good
  settings stay, and a Warning event `InvalidComputeModes` on the ConfigMap names the key and
  the settings kept (once per version of the ConfigMap; by the leader only), with a log line;
- the API server unreachable: the last settings stay; the next read tries again.
A restarted extender has no last good settings but the built-in ones until the ConfigMap reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lightkube import AsyncClient, codecs
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import ConfigMap

from gpupool.adapters.wire import names
from gpupool.adapters.wire.compute_modes import describe, read_compute_modes
from gpupool.adapters.wire.times import format_time
from gpupool.domain.compute_modes import BUILT_IN, ComputeModes, InvalidComputeModes

log = logging.getLogger("gpupool.extender.compute_modes")

DEFAULT_CONFIGMAP = "gpupool-system/gpupool-compute-modes"
INTERVAL_S = 5.0


@dataclass(frozen=True, slots=True)
class Refused:
    """A version of the ConfigMap that does not parse, and what is kept instead."""

    version: str
    message: str


class ComputeModesHolder:
    """The last good settings; `take` folds in one read of the ConfigMap (pure of I/O)."""

    def __init__(self) -> None:
        self.current: ComputeModes = BUILT_IN
        self._seen: str | None = None  # the version last folded in

    def take(self, obj: Mapping[str, Any] | None, where: str) -> Refused | None:
        """Fold in the ConfigMap as read (None: absent). A Refused for a new unreadable
        version (say so once); None otherwise."""
        if obj is None:
            if self._seen != "":
                log.info("no ConfigMap %s: no compute-mode defaults (no MPS unless asked)", where)
            self._seen = ""
            self.current = BUILT_IN
            return None
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if version and version == self._seen:
            return None
        self._seen = version
        try:
            modes = read_compute_modes(obj.get("data"))
        except InvalidComputeModes as err:
            message = (
                f"ConfigMap {where}: {err}; nothing of this version is applied, the last good "
                f"compute-mode settings are kept: {describe(self.current)}"
            )
            log.error("%s", message)
            return Refused(version, message)
        self.current = modes
        log.info("compute-mode defaults from ConfigMap %s: %s", where, describe(modes))
        return None


class ComputeModesWatch:
    def __init__(
        self,
        client: AsyncClient,
        where: str = DEFAULT_CONFIGMAP,
        *,
        interval_s: float = INTERVAL_S,
        leading: Callable[[], bool] = lambda: True,
        clock: Callable[[], float],
    ) -> None:
        self.client = client
        self.namespace, _, self.name = where.partition("/")
        self.where = where
        self.interval_s = interval_s
        self.leading = leading
        self.clock = clock
        self.holder = ComputeModesHolder()

    def current(self) -> ComputeModes:
        return self.holder.current

    async def read_once(self) -> None:
        try:
            found: Any = await self.client.get(ConfigMap, self.name, namespace=self.namespace)
            obj: Mapping[str, Any] | None = found.to_dict()
        except ApiError as err:
            if err.status.code != 404:
                log.warning("cannot read ConfigMap %s (%s): settings kept", self.where, err)
                return
            obj = None
        refused = self.holder.take(obj, self.where)
        if refused is not None and obj is not None and self.leading():
            await self._event(obj, refused.message)

    async def _event(self, obj: Mapping[str, Any], message: str) -> None:
        meta = obj.get("metadata") or {}
        stamp = format_time(self.clock())
        event: Any = codecs.from_dict(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"generateName": f"{self.name}.", "namespace": self.namespace},
                "involvedObject": {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": self.name,
                    "namespace": self.namespace,
                    "uid": meta.get("uid"),
                    "resourceVersion": meta.get("resourceVersion"),
                },
                "reason": "InvalidComputeModes",
                "message": message[:1024],
                "type": "Warning",
                "source": {"component": "gpupool-extender"},
                "reportingComponent": f"{names.GROUP}/extender",
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
                "count": 1,
            }
        )
        try:
            await self.client.create(event)
        except ApiError as err:  # best effort: the log line says it too
            log.warning("could not record event InvalidComputeModes on %s: %s", self.where, err)

    async def refresh(self) -> None:
        """`read_once`, where an unreachable API server keeps the settings (the next tries)."""
        try:
            await self.read_once()
        except Exception as err:
            log.warning("reading ConfigMap %s failed (%s): settings kept", self.where, err)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.refresh()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.interval_s)
