"""A stand-in API server on the loopback: an aiohttp app answering every path (or `path`) with
`handle`; yields its port and is torn down after."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from aiohttp import web


@asynccontextmanager
async def loopback_server(
    handle: Callable[[web.Request], Awaitable[web.StreamResponse]], path: str = "/{tail:.*}"
) -> AsyncIterator[int]:
    app = web.Application()
    app.router.add_route("*", path, handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    finally:
        await runner.cleanup()
