"""A fake kubelet of our own: its device-plugin Registration service over real gRPC on the unix
socket a device plugin dials (`kubelet.sock` in the plugin directory). There is no kubelet here,
so this is the small honest stand-in: it records every RegisterRequest and accepts it."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import grpc

from gpupool.node.device_plugin.proto import api_pb2, api_pb2_grpc


class FakeKubelet(api_pb2_grpc.RegistrationServicer):
    """The kubelet's Registration service: `requests` holds every RegisterRequest, in order."""

    def __init__(self) -> None:
        self.requests: asyncio.Queue[api_pb2.RegisterRequest] = asyncio.Queue()

    async def Register(self, request: api_pb2.RegisterRequest, context: Any) -> api_pb2.Empty:
        await self.requests.put(request)
        return api_pb2.Empty()


@asynccontextmanager
async def fake_kubelet(plugin_dir: Path) -> AsyncIterator[FakeKubelet]:
    """A FakeKubelet serving on `plugin_dir`/kubelet.sock until the block ends."""
    kubelet = FakeKubelet()
    server = grpc.aio.server()
    api_pb2_grpc.add_RegistrationServicer_to_server(kubelet, server)  # type: ignore[no-untyped-call]
    server.add_insecure_port(f"unix://{plugin_dir / 'kubelet.sock'}")
    await server.start()
    try:
        yield kubelet
    finally:
        await server.stop(None)


@contextmanager
def short_socket_dir(prefix: str) -> Iterator[Path]:
    """A fresh directory under /tmp, removed afterwards: unix socket paths must stay under ~107
    bytes, and pytest's tmp_path can be longer."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
