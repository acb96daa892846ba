"""A one-device device plugin that names its device only as a CDI device, for the real node's
kubelet: the check that the node's container runtime injects CDI devices (containerd v2 does;
Debian's containerd 1.6 ignores the CRI request's CDI devices).

It serves the device-plugin API over real gRPC on a socket in the kubelet's device-plugin folder,
registers `resource` with the kubelet there, and answers Allocate with one CDI device name. The
CDI spec it names is written into containerd's CDI spec folder, so containerd's edits (an
environment variable) show in the container's OCI spec.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from gpupool.node.device_plugin.proto import api_pb2, api_pb2_grpc

CDI_KIND = "gpupool.dev/cdi-check"
DEVICE = "dev0"
CDI_ENV = "GPUPOOL_CDI_CHECK=dev0"


class _OneCdiDevice(api_pb2_grpc.DevicePluginServicer):
    def __init__(self) -> None:
        self.stopped = threading.Event()
        self.allocated: list[list[str]] = []

    def GetDevicePluginOptions(self, request: Any, context: Any) -> api_pb2.DevicePluginOptions:
        return api_pb2.DevicePluginOptions()

    def ListAndWatch(self, request: Any, context: Any) -> Iterator[api_pb2.ListAndWatchResponse]:
        yield api_pb2.ListAndWatchResponse(devices=[api_pb2.Device(ID=DEVICE, health="Healthy")])
        self.stopped.wait()

    def Allocate(self, request: api_pb2.AllocateRequest, context: Any) -> api_pb2.AllocateResponse:
        responses = []
        for container in request.container_requests:
            self.allocated.append(list(container.devices_ids))
            responses.append(
                api_pb2.ContainerAllocateResponse(
                    cdi_devices=[api_pb2.CDIDevice(name=f"{CDI_KIND}={DEVICE}")]
                )
            )
        return api_pb2.AllocateResponse(container_responses=responses)

    def PreStartContainer(self, request: Any, context: Any) -> api_pb2.PreStartContainerResponse:
        return api_pb2.PreStartContainerResponse()


def cdi_spec() -> dict[str, Any]:
    """The CDI spec of the one device: an environment variable is all it adds."""
    return {
        "cdiVersion": "0.6.0",
        "kind": CDI_KIND,
        "devices": [{"name": DEVICE, "containerEdits": {"env": [CDI_ENV]}}],
    }


@contextlib.contextmanager
def cdi_device_plugin(
    plugin_dir: Path, cdi_spec_dir: Path, resource: str
) -> Iterator[_OneCdiDevice]:
    """Serve and register the plugin until the block ends; then stop it and remove its socket
    and its CDI spec (the host must be as before when the dev cluster goes down)."""
    spec_file = cdi_spec_dir / "gpupool-cdi-check.json"
    spec_file.write_text(json.dumps(cdi_spec()))
    socket = plugin_dir / "gpupool-cdi-check.sock"
    plugin = _OneCdiDevice()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    api_pb2_grpc.add_DevicePluginServicer_to_server(plugin, server)  # type: ignore[no-untyped-call]
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    try:
        with grpc.insecure_channel(f"unix://{plugin_dir / 'kubelet.sock'}") as channel:
            api_pb2_grpc.RegistrationStub(channel).Register(  # type: ignore[no-untyped-call]
                api_pb2.RegisterRequest(
                    version="v1beta1", endpoint=socket.name, resource_name=resource
                ),
                timeout=30,
            )
        yield plugin
    finally:
        plugin.stopped.set()
        server.stop(None).wait()
        socket.unlink(missing_ok=True)
        spec_file.unlink(missing_ok=True)
