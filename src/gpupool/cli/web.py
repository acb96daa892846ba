"""`gpupool web`: the web view (the pool map, tenant and node pages, live) over HTTP(S).

Wiring only: the read is `adapters.kubernetes.views_read`, the values `state.views`, access
`adapters.web.access`, the routes `adapters.web.server`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from gpupool.adapters.kubeclient import async_client
from gpupool.adapters.kubernetes.watch_cache import (
    GPULEASES,
    GPUNODES,
    GPUQUOTAS,
    NODES,
    TENANT_PODS,
    WatchCache,
)
from gpupool.adapters.tls import server_context
from gpupool.adapters.web.access import Access, KubeReviews
from gpupool.adapters.web.feed import CacheFeed
from gpupool.adapters.web.server import make_app
from gpupool.adapters.web.source import StateSource
from gpupool.adapters.web.ticks import stepped, until_step
from gpupool.cli.daemon import configure_logging, run_loop, stop_on_signals

log = logging.getLogger("gpupool.web")


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "web",
        help="serve the web view: pool map, tenant and node pages, live (docs/views.md)",
        description=(
            "Serves the pool map, tenant pages and node pages, with the JSON of `gpupool status|"
            "queue|leases -o json` under /api/v1 and live updates as server-sent events. "
            "Reads the cluster with its own identity; each person logs in with a Kubernetes "
            "bearer token (TokenReview) and sees what their RBAC lets them read "
            "(SubjectAccessReview)."
        ),
    )
    parser.add_argument("--kubeconfig", type=Path, default=os.environ.get("KUBECONFIG") or None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8890)
    parser.add_argument(
        "--resync-seconds",
        type=float,
        default=30.0,
        help=(
            "what moves with time (held times, GiB-hours, waits) moves in steps of this many "
            "seconds; a watched change shows at once"
        ),
    )
    parser.add_argument(
        "--auth-cache-seconds",
        type=float,
        default=10.0,
        help="keep TokenReview and SubjectAccessReview answers this long",
    )
    parser.add_argument(
        "--tls-cert", type=Path, default=None, help="serve HTTPS with this certificate (PEM)"
    )
    parser.add_argument("--tls-key", type=Path, default=None, help="the --tls-cert's key (PEM)")
    parser.add_argument(
        "--dev-insecure",
        action="store_true",
        help="dev clusters only: a request without a token sees everything, as an operator",
    )
    parser.add_argument("--log-level", default="INFO")
    parser.set_defaults(func=run)


WEB_KINDS = (NODES, GPUNODES, GPULEASES, TENANT_PODS, GPUQUOTAS)  # what the views read


async def serve(args: argparse.Namespace, stop: asyncio.Event) -> None:
    client = async_client(args.kubeconfig, field_manager="gpupool-web")
    # One copy of the cluster fed by list+watch, and the views kept between renders: a change
    # rebuilds what it reaches (feed.py), with no LIST; heartbeats reach nothing.
    cache = WatchCache(client, WEB_KINDS)
    # figures that move with time move once per step (ticks.py: a change's patch stays small,
    # and an idle view renders once a step)
    clock = stepped(time.time, args.resync_seconds)
    source = StateSource(
        lambda now: feed.render(now),
        clock,
        resync_s=args.resync_seconds,
        until_step=until_step(time.time, args.resync_seconds),
    )
    feed = CacheFeed(cache, source.poke)
    access = Access(
        KubeReviews(client),
        time.monotonic,
        ttl_s=args.auth_cache_seconds,
        dev_insecure=args.dev_insecure,
    )
    context = None
    if args.tls_cert is not None:
        context = server_context(args.tls_cert, args.tls_key, None)
    app = make_app(source, access, secure_cookie=context is not None)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port, ssl_context=context)
    await site.start()
    scheme = "https" if context is not None else "http"
    log.info("web view on %s://%s:%d/", scheme, args.host, args.port)
    if args.dev_insecure:
        log.warning("--dev-insecure: requests without a token see the whole cluster")
    tasks = [
        asyncio.ensure_future(source.run(stop)),
        asyncio.ensure_future(cache.run(stop)),
    ]
    try:
        await stop.wait()
    finally:
        for task in tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*tasks, return_exceptions=True)
        await runner.cleanup()
        await client.close()


def run(args: argparse.Namespace) -> int:
    if (args.tls_cert is None) != (args.tls_key is None):
        print("gpupool web: error: --tls-cert and --tls-key go together", file=sys.stderr)
        return 2
    if not args.resync_seconds > 0:
        print("gpupool web: error: --resync-seconds must be more than 0", file=sys.stderr)
        return 2
    configure_logging(args.log_level)

    async def main() -> None:
        stop = stop_on_signals()
        await serve(args, stop)

    run_loop(main())
    return 0
