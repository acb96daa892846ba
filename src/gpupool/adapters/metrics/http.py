"""A small aiohttp server for GET /metrics (and /healthz), one per daemon.

`refresh`, when given, runs before each scrape: the agent reads its cards and leases then, so a
scrape shows the node as it is now and costs nothing between scrapes.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)


def metrics_app(
    registry: CollectorRegistry, refresh: Callable[[], Awaitable[None]] | None = None
) -> web.Application:
    async def metrics(_: web.Request) -> web.Response:
        if refresh is not None:
            try:
                await refresh()
            except Exception:  # a scrape still answers: the last readings, and the error logged
                log.exception("refreshing metrics failed; serving the last readings")
        return web.Response(
            body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    return app


def parse_address(text: str) -> tuple[str, int]:
    """`host:port` or `:port` (all interfaces) into (host, port); ValueError says what to write."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"metrics address must be host:port or :port, e.g. :9400; got {text!r}")
    return host or "0.0.0.0", int(port)


async def start_metrics_server(
    registry: CollectorRegistry,
    host: str,
    port: int,
    refresh: Callable[[], Awaitable[None]] | None = None,
) -> web.AppRunner | None:
    """Serve /metrics on host:port until the returned runner is cleaned up.

    A port that cannot be bound is logged as an error and None returned: the daemon's own work
    (the quota gate, the device plugin) matters more than being scraped, and a second replica
    on the same host must not crash on the first one's port."""
    runner = web.AppRunner(metrics_app(registry, refresh), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as err:
        log.error("cannot serve /metrics on %s:%d (%s); running without /metrics", host, port, err)
        await runner.cleanup()
        return None
    log.info("metrics on http://%s:%d/metrics", host, port)
    return runner
