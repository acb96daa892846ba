"""The kubelet DRA plugin for `gpu.gpupool.io`: gRPC over unix sockets (grpc.aio).

Two sockets, as the kubelet's plugin manager expects of a DRA driver:

- the registration socket `<registry dir>/gpu.gpupool.io-reg.sock` (plugins_registry), serving
  `pluginregistration.Registration`: the kubelet's plugin watcher finds it, calls GetInfo
  (type `DRAPlugin`, the driver's name, the service socket, `v1.DRAPlugin`) and reports the
  outcome with NotifyRegistrationStatus;
- the service socket `<plugin dir>/dra.sock`, serving `k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`:
  NodePrepareResources and NodeUnprepareResources; and `v1alpha1.DRAResourceHealth` (health.py),
  the cards' health, which a 1.36 kubelet asks for as soon as the driver registers.

Failures are per claim (the answer's `error`), never the whole call, so one bad claim does not
hold back the others in a batch; the kubelet retries a claim that failed. `prepare` decides and
writes; this module only translates.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from gpupool.adapters.wire.names import DRA_DRIVER
from gpupool.domain.errors import GpupoolError
from gpupool.domain.sockets import check_socket_path
from gpupool.node.dra.checkpoint import PreparedClaim
from gpupool.node.dra.claims import ClaimRef
from gpupool.node.dra.health import HealthServicer
from gpupool.node.dra.prepare import ClaimPreparer, ClaimSourceUnavailable
from gpupool.node.dra.proto import (
    dra_health_pb2_grpc,
    dra_pb2,
    dra_pb2_grpc,
    pluginregistration_pb2,
    pluginregistration_pb2_grpc,
)

log = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"  # pluginregistration v1's DRAPlugin
DRA_SERVICE = "v1.DRAPlugin"  # the kubelet's dra/v1 DRAPluginService
DEFAULT_PLUGINS_DIR = Path("/var/lib/kubelet/plugins")
DEFAULT_REGISTRY_DIR = Path("/var/lib/kubelet/plugins_registry")


@dataclass(frozen=True, slots=True)
class DraPluginConfig:
    plugin_dir: Path = field(default_factory=lambda: DEFAULT_PLUGINS_DIR / DRA_DRIVER)
    registry_dir: Path = DEFAULT_REGISTRY_DIR
    socket_name: str = "dra.sock"

    @property
    def socket_path(self) -> Path:
        return self.plugin_dir / self.socket_name

    @property
    def registration_socket(self) -> Path:
        return self.registry_dir / f"{DRA_DRIVER}-reg.sock"


def prepared_answer(claim: PreparedClaim) -> dra_pb2.NodePrepareResourceResponse:
    """What the kubelet is told about a prepared claim: each allocated device and its CDI ID."""
    answer = dra_pb2.NodePrepareResourceResponse()
    for device in claim.devices:
        entry = answer.devices.add(
            request_names=[device.request],
            pool_name=device.pool,
            device_name=device.device,
            cdi_device_ids=[device.cdi_device_id],
        )
        if device.share_id is not None:
            entry.share_id = device.share_id
    return answer


class DraServicer(dra_pb2_grpc.DRAPluginServicer):
    def __init__(self, preparer: ClaimPreparer) -> None:
        self.preparer = preparer
        self._lock = asyncio.Lock()  # one claim at a time: each room check sees the others

    async def _prepare_one(self, claim: dra_pb2.Claim) -> dra_pb2.NodePrepareResourceResponse:
        ref = ClaimRef(claim.namespace, claim.name, claim.uid)
        try:
            done = await self.preparer.prepare(ref)
        except GpupoolError as err:
            log.warning("NodePrepareResources: claim %s refused: %s", ref, err)
            return dra_pb2.NodePrepareResourceResponse(error=str(err))
        except ClaimSourceUnavailable as err:
            log.warning("NodePrepareResources: claim %s: claim source unavailable: %s", ref, err)
            return dra_pb2.NodePrepareResourceResponse(
                error=f"gpupool DRA plugin: cannot read claim {ref} now ({err}); retrying"
            )
        except Exception as err:
            log.exception("NodePrepareResources: claim %s failed", ref)
            return dra_pb2.NodePrepareResourceResponse(
                error=f"gpupool DRA plugin: preparing claim {ref} failed: "
                f"{type(err).__name__}: {err}"
            )
        log.info(
            "prepared claim %s (uid %s): %s",
            ref,
            ref.uid,
            ", ".join(f"{c.uuid} {c.memory_bytes}B {c.compute_pct}%" for c in done.cards),
        )
        return prepared_answer(done)

    async def NodePrepareResources(
        self, request: dra_pb2.NodePrepareResourcesRequest, context: Any
    ) -> dra_pb2.NodePrepareResourcesResponse:
        response = dra_pb2.NodePrepareResourcesResponse()
        async with self._lock:
            for claim in request.claims:
                response.claims[claim.uid].CopyFrom(await self._prepare_one(claim))
        return response

    async def NodeUnprepareResources(
        self, request: dra_pb2.NodeUnprepareResourcesRequest, context: Any
    ) -> dra_pb2.NodeUnprepareResourcesResponse:
        response = dra_pb2.NodeUnprepareResourcesResponse()
        async with self._lock:
            for claim in request.claims:
                answer = response.claims[claim.uid]
                try:
                    if self.preparer.unprepare(claim.uid):
                        log.info("unprepared claim %s/%s", claim.namespace, claim.name)
                except Exception as err:
                    log.exception("NodeUnprepareResources: claim %s failed", claim.uid)
                    answer.error = (
                        f"gpupool DRA plugin: unpreparing claim {claim.namespace}/{claim.name} "
                        f"failed: {type(err).__name__}: {err}"
                    )
        return response


class RegistrationServicer(pluginregistration_pb2_grpc.RegistrationServicer):
    """What the kubelet's plugin watcher asks on the registration socket."""

    def __init__(self, endpoint: Path) -> None:
        self.endpoint = endpoint
        self.statuses: asyncio.Queue[pluginregistration_pb2.RegistrationStatus] = asyncio.Queue()

    async def GetInfo(
        self, request: pluginregistration_pb2.InfoRequest, context: Any
    ) -> pluginregistration_pb2.PluginInfo:
        return pluginregistration_pb2.PluginInfo(
            type=PLUGIN_TYPE,
            name=DRA_DRIVER,
            endpoint=str(self.endpoint),
            supported_versions=[DRA_SERVICE],
        )

    async def NotifyRegistrationStatus(
        self, request: pluginregistration_pb2.RegistrationStatus, context: Any
    ) -> pluginregistration_pb2.RegistrationStatusResponse:
        if request.plugin_registered:
            log.info("the kubelet registered DRA driver %s", DRA_DRIVER)
        else:
            log.error("the kubelet refused DRA driver %s: %s", DRA_DRIVER, request.error)
        await self.statuses.put(request)
        return pluginregistration_pb2.RegistrationStatusResponse()


class DraPluginServer:
    """Serves the DRA service and the registration service on their sockets."""

    def __init__(
        self, config: DraPluginConfig, preparer: ClaimPreparer, health_interval_s: float = 5.0
    ) -> None:
        self.config = config
        self.servicer = DraServicer(preparer)
        self.health = HealthServicer(preparer.settings.node, preparer.inventory, health_interval_s)
        self.registration = RegistrationServicer(config.socket_path)
        self._servers: list[Any] = []

    async def _serve(self, path: Path, what: str, *services: tuple[Any, Any]) -> None:
        check_socket_path(str(path), what, "give the agent shorter kubelet plugin folders")
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a socket left by an earlier run
        server = grpc.aio.server()
        for add, servicer in services:
            add(servicer, server)
        server.add_insecure_port(f"unix://{path}")
        await server.start()
        self._servers.append(server)

    async def start(self) -> None:
        """The service socket first: the kubelet dials it as soon as it sees the registration."""
        self.health.open()
        await self._serve(
            self.config.socket_path,
            "the DRA plugin's socket",
            (dra_pb2_grpc.add_DRAPluginServicer_to_server, self.servicer),
            (dra_health_pb2_grpc.add_DRAResourceHealthServicer_to_server, self.health),
        )
        await self._serve(
            self.config.registration_socket,
            "the DRA plugin's registration socket",
            (pluginregistration_pb2_grpc.add_RegistrationServicer_to_server, self.registration),
        )
        log.info(
            "DRA driver %s serving on %s, registration on %s",
            DRA_DRIVER,
            self.config.socket_path,
            self.config.registration_socket,
        )

    async def stop(self, grace_s: float = 1.0) -> None:
        """Registration socket first, so the kubelet stops routing to the service; the health
        streams end cleanly first."""
        self.health.close()
        for server in reversed(self._servers):
            await server.stop(grace_s)
        self._servers.clear()
        for path in (self.config.registration_socket, self.config.socket_path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    async def run(self, stop: asyncio.Event) -> None:
        await self.start()
        try:
            await stop.wait()
        finally:
            await self.stop()
