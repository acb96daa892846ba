"""The kubelet device plugin for `gpupool.io/vgpu`: gRPC v1beta1 over unix sockets (grpc.aio).

This module does the I/O (sockets, files, the lease source); `decide` and `devices` decide.
Every handler turns an unexpected exception into an INTERNAL status with a message, so a bug
fails one call instead of the plugin.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import grpc

from gpupool.adapters.wire.names import RES_VGPU
from gpupool.domain.devices import Gpu
from gpupool.domain.reserve import DEFAULT_RESERVE_PCT
from gpupool.domain.sockets import check_socket_path
from gpupool.node.device_plugin.decide import (
    Grant,
    PluginPaths,
    Refusal,
    decide_allocation,
    lease_missing,
)
from gpupool.node.device_plugin.devices import preferred_devices, virtual_devices
from gpupool.node.device_plugin.proto import api_pb2, api_pb2_grpc
from gpupool.ports import AllocationSource, Inventory, LeaseSourceUnavailable, PodLease

log = logging.getLogger(__name__)

RESOURCE_NAME = RES_VGPU
API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
DEFAULT_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class PluginConfig:
    node: str
    plugin_dir: Path = DEFAULT_PLUGIN_DIR
    socket_name: str = "gpupool-vgpu.sock"
    resource_name: str = RESOURCE_NAME
    per_card: int = 10
    reserve_pct: float = DEFAULT_RESERVE_PCT
    paths: PluginPaths = field(default_factory=PluginPaths)
    register_timeout_s: float = 10.0
    watch_interval_s: float = 2.0  # how often to check that the kubelet has not removed our socket
    # The extender creates a pod's GpuLease just after its Binding: a kubelet quick to admit the
    # pod may ask for its devices a moment before the lease stands. Wait this long for it.
    lease_wait_s: float = 10.0
    lease_poll_s: float = 0.2

    @property
    def socket_path(self) -> Path:
        return self.plugin_dir / self.socket_name

    @property
    def kubelet_socket(self) -> Path:
        return self.plugin_dir / KUBELET_SOCKET


def write_file_atomically(path: Path, text: str, mode: int = 0o644) -> None:
    """Write `text` so that a reader sees the old content or the new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


class DevicePluginServicer(api_pb2_grpc.DevicePluginServicer):
    def __init__(
        self, config: PluginConfig, inventory: Inventory, source: AllocationSource
    ) -> None:
        self._config = config
        self._inventory = inventory
        self._source = source
        self._gpus: tuple[Gpu, ...] = inventory.devices()
        self._version = 0
        self._changed = asyncio.Condition()
        self._allocating = asyncio.Lock()
        self._closing = False

    # -- state -------------------------------------------------------------------------------
    async def refresh(self) -> None:
        """Re-read the inventory; ListAndWatch streams send the new list if anything changed."""
        gpus = self._inventory.devices()
        async with self._changed:
            if gpus != self._gpus:
                self._gpus = gpus
                self._version += 1
                self._changed.notify_all()

    async def close(self) -> None:
        async with self._changed:
            self._closing = True
            self._changed.notify_all()

    def device_list(self) -> api_pb2.ListAndWatchResponse:
        return api_pb2.ListAndWatchResponse(
            devices=[
                api_pb2.Device(
                    ID=d.id,
                    health=HEALTHY if d.healthy else UNHEALTHY,
                    topology=api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=d.numa_node)]),
                )
                for d in virtual_devices(self._gpus, self._config.per_card)
            ]
        )

    # -- error handling ----------------------------------------------------------------------
    async def _guard(self, name: str, context: Any, work: Callable[[], Awaitable[T]]) -> T:
        try:
            return await work()
        except grpc.aio.AbortError:
            raise
        except LeaseSourceUnavailable as err:
            log.warning("%s: lease source unavailable: %s", name, err)
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"gpupool {name}: {err}")
            raise  # not reached: abort raises
        except Exception as err:
            log.exception("%s failed", name)
            await context.abort(
                grpc.StatusCode.INTERNAL,
                f"gpupool device plugin: {name} failed: {type(err).__name__}: {err}",
            )
            raise  # not reached: abort raises

    # -- DevicePlugin ------------------------------------------------------------------------
    async def GetDevicePluginOptions(
        self, request: api_pb2.Empty, context: Any
    ) -> api_pb2.DevicePluginOptions:
        return api_pb2.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=True
        )

    async def ListAndWatch(
        self, request: api_pb2.Empty, context: Any
    ) -> AsyncIterator[api_pb2.ListAndWatchResponse]:
        seen = -1
        while True:

            async def next_list() -> api_pb2.ListAndWatchResponse | None:
                nonlocal seen
                async with self._changed:
                    await self._changed.wait_for(lambda: self._closing or self._version != seen)
                    if self._closing:
                        return None
                    seen = self._version
                    return self.device_list()

            response = await self._guard("ListAndWatch", context, next_list)
            if response is None:
                return
            yield response

    async def GetPreferredAllocation(
        self, request: api_pb2.PreferredAllocationRequest, context: Any
    ) -> api_pb2.PreferredAllocationResponse:
        async def work() -> api_pb2.PreferredAllocationResponse:
            try:  # the pod's lease may trail its Binding by a moment: wait for one to steer to
                leases = await self._leases_when(lambda ls: any(not x.device_ids for x in ls))
            except LeaseSourceUnavailable:
                leases = []  # only a hint: answer without steering
            awaiting = [x for x in leases if not x.device_ids]
            return api_pb2.PreferredAllocationResponse(
                container_responses=[
                    api_pb2.ContainerPreferredAllocationResponse(
                        deviceIDs=preferred_devices(
                            list(c.available_deviceIDs),
                            list(c.must_include_deviceIDs),
                            int(c.allocation_size),
                            awaiting,
                        )
                    )
                    for c in request.container_requests
                ]
            )

        return await self._guard("GetPreferredAllocation", context, work)

    async def Allocate(
        self, request: api_pb2.AllocateRequest, context: Any
    ) -> api_pb2.AllocateResponse:
        async def work() -> api_pb2.AllocateResponse | Refusal:
            async with self._allocating:
                containers = [list(c.devices_ids) for c in request.container_requests]
                return await self._allocate(containers)

        result = await self._guard("Allocate", context, work)
        if isinstance(result, Refusal):
            log.warning("Allocate refused: %s", result.message)
            await context.abort(getattr(grpc.StatusCode, result.code), result.message)
            raise AssertionError("not reached: abort raises")
        return result

    async def _leases_when(self, ready: Callable[[list[PodLease]], bool]) -> list[PodLease]:
        """The node's leases, read again every `lease_poll_s` for up to `lease_wait_s` while
        `ready` says the lease asked for is not among them yet (see PluginConfig.lease_wait_s)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._config.lease_wait_s
        while True:
            leases = list(await self._source.leases_on(self._config.node))
            if ready(leases) or loop.time() >= deadline:
                return leases
            await asyncio.sleep(self._config.lease_poll_s)

    async def _allocate(self, containers: list[list[str]]) -> api_pb2.AllocateResponse | Refusal:
        config = self._config
        gpus = self._inventory.devices()
        leases = await self._leases_when(
            lambda ls: not any(lease_missing(ids, ls) for ids in containers)
        )
        responses = []
        for device_ids in containers:
            verdict = decide_allocation(
                node=config.node,
                device_ids=device_ids,
                gpus=gpus,
                leases=leases,
                reserve_pct=config.reserve_pct,
                paths=config.paths,
            )
            if isinstance(verdict, Refusal):
                return verdict
            self._apply(verdict)
            if not verdict.already_recorded:
                await self._source.record_devices(verdict.lease.lease, verdict.device_ids)
            bound = replace(verdict.lease, device_ids=verdict.device_ids)
            leases = [bound if x.lease == bound.lease else x for x in leases]
            responses.append(
                api_pb2.ContainerAllocateResponse(
                    envs=dict(verdict.envs),
                    mounts=[
                        api_pb2.Mount(
                            container_path=m.container_path,
                            host_path=m.host_path,
                            read_only=m.read_only,
                        )
                        for m in verdict.mounts
                    ],
                )
            )
            log.info(
                "Allocate: lease %s (pod %s) on %s",
                verdict.lease.lease,
                verdict.lease.pod,
                ",".join(verdict.lease.card_uuids),
            )
        return api_pb2.AllocateResponse(container_responses=responses)

    def _apply(self, grant: Grant) -> None:
        write_file_atomically(Path(grant.limits_host_path), grant.limits_text)
        usage = Path(grant.usage_host_path)
        usage.mkdir(parents=True, exist_ok=True)
        usage.chmod(0o777)  # the container's processes may run as any user (not the umask's)

    async def PreStartContainer(
        self, request: api_pb2.PreStartContainerRequest, context: Any
    ) -> api_pb2.PreStartContainerResponse:
        return api_pb2.PreStartContainerResponse()


async def register_with_kubelet(config: PluginConfig) -> None:
    """Registration.Register on the kubelet's socket; raises grpc.aio.AioRpcError on failure."""
    async with grpc.aio.insecure_channel(f"unix://{config.kubelet_socket}") as channel:
        stub = api_pb2_grpc.RegistrationStub(channel)  # type: ignore[no-untyped-call]
        await stub.Register(
            api_pb2.RegisterRequest(
                version=API_VERSION,
                endpoint=config.socket_name,
                resource_name=config.resource_name,
                options=api_pb2.DevicePluginOptions(
                    pre_start_required=False, get_preferred_allocation_available=True
                ),
            ),
            timeout=config.register_timeout_s,
        )


class DevicePluginServer:
    """Serves the plugin on its socket, registers it, follows health, re-registers after the
    kubelet restarts (the kubelet removes plugin sockets when it starts)."""

    def __init__(
        self, config: PluginConfig, inventory: Inventory, source: AllocationSource
    ) -> None:
        self.config = config
        self.inventory = inventory
        self.source = source
        self.servicer = DevicePluginServicer(config, inventory, source)
        self._server: Any = None
        self.registrations = 0

    def _prepare_host_files(self) -> None:
        paths = self.config.paths
        Path(paths.limits_host_dir).mkdir(parents=True, exist_ok=True)
        Path(paths.usage_host_dir).mkdir(parents=True, exist_ok=True)
        if paths.preload == "file":
            write_file_atomically(Path(paths.ld_so_preload_host), paths.limiter_container + "\n")

    async def start(self) -> None:
        """Listen on the plugin socket and register with the kubelet."""
        self._prepare_host_files()
        path = self.config.socket_path
        check_socket_path(
            str(path), "the device plugin's socket", "give the agent a shorter --device-plugin-dir"
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        server = grpc.aio.server()
        api_pb2_grpc.add_DevicePluginServicer_to_server(  # type: ignore[no-untyped-call]
            self.servicer, server
        )
        server.add_insecure_port(f"unix://{path}")
        await server.start()
        self._server = server
        await register_with_kubelet(self.config)
        self.registrations += 1
        log.info(
            "registered %s with the kubelet at %s (endpoint %s)",
            self.config.resource_name,
            self.config.kubelet_socket,
            self.config.socket_name,
        )

    async def stop(self, grace_s: float = 1.0) -> None:
        await self.servicer.close()
        if self._server is not None:
            await self._server.stop(grace_s)
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.config.socket_path.unlink()

    async def _keep_registered(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.config.watch_interval_s)
            if stop.is_set() or self.config.socket_path.exists():
                continue
            log.warning(
                "plugin socket %s is gone (kubelet restart?); serving again",
                self.config.socket_path,
            )
            await self.stop()
            self.servicer = DevicePluginServicer(self.config, self.inventory, self.source)
            await self._start_with_retry(stop)

    async def _start_with_retry(self, stop: asyncio.Event) -> None:
        delay = 1.0
        while not stop.is_set():
            try:
                await self.start()
                return
            except grpc.aio.AioRpcError as err:
                log.warning(
                    "registration with the kubelet failed (%s); retrying in %.0fs",
                    err.details() or err.code(),
                    delay,
                )
                await self.stop()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
            delay = min(delay * 2, 30.0)

    async def refresh(self) -> None:
        """Re-read the inventory (after a health event someone else consumed)."""
        await self.servicer.refresh()

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until `stop` is set. Health events are the agent's to consume (NodeAgent): it
        calls `refresh` and republishes the GpuNode, so one loop reads the inventory's events."""
        await self._start_with_retry(stop)
        try:
            await self._keep_registered(stop)
        finally:
            await self.stop()
