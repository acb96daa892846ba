"""`gpupool extender`: the scheduler extender (filter, prioritize, bind) over HTTP."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import ssl
import sys
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from gpupool.adapters.extender_http.api import ExtenderApi
from gpupool.adapters.extender_http.bind import BIND_WAIT_S, MAX_BINDS
from gpupool.adapters.extender_http.informer import Informer
from gpupool.adapters.extender_http.k8s_api import LightkubeExtenderApi
from gpupool.adapters.extender_http.leader import LeaderOnlyWrites
from gpupool.adapters.extender_http.server import BIND_FORWARD_TIMEOUT_S, Metrics, make_app
from gpupool.adapters.extender_http.service import Extender
from gpupool.adapters.kubeclient import async_client, kube_config
from gpupool.adapters.kubernetes.compute_modes_watch import (
    DEFAULT_CONFIGMAP,
    INTERVAL_S,
    ComputeModesWatch,
)
from gpupool.adapters.kubernetes.crds import apply_crds
from gpupool.adapters.kubernetes.fast_post import bind_poster
from gpupool.adapters.kubernetes.watch_cache import RELIST_S
from gpupool.adapters.tls import server_context
from gpupool.cli.daemon import (
    add_leader_args,
    configure_logging,
    elector_from_args,
    leader_args_problem,
    run_loop,
    stop_on_signals,
)
from gpupool.placement.policies import POLICIES
from gpupool.state.cluster import ClusterCache

log = logging.getLogger("gpupool.extender")

SCHEDULER_NAME = "system:kube-scheduler"  # the CN of kube-scheduler's client certificate


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "extender",
        help="run the kube-scheduler extender (filter, prioritize, bind) for gpupool.io/vgpu pods",
        description=(
            "Serves POST /filter, /prioritize, /bind and GET /healthz, /metrics for kube-scheduler "
            "(nodeCacheCapable: true), and /prioritize-cpu for a second, ignorable entry that "
            "scores pods without a gpupool GPU (docs/extender.md). Keeps a cache of nodes, "
            "GpuNodes and GpuLeases from the API server; bind reserves the slice as the pod's "
            "GpuLease, annotates the pod and creates the Binding. With --leader-elect only the "
            "replica holding the coordination Lease binds; with --advertise-url too, the leader "
            "writes that URL on the Lease and the other replicas forward /bind to it."
        ),
    )
    parser.add_argument("--kubeconfig", type=Path, default=os.environ.get("KUBECONFIG") or None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8888)
    parser.add_argument(
        "--policy", default="gpupool", choices=sorted(POLICIES), help="default placement policy"
    )
    parser.add_argument(
        "--apply-crds",
        action="store_true",
        help="apply deploy/crds before starting (dev clusters)",
    )
    parser.add_argument("--crd-dir", type=Path, default=None)
    parser.add_argument(
        "--resync-seconds",
        type=float,
        default=RELIST_S,
        help="list everything again about this often, beside the watches (a safety net, "
        "jittered by a fifth; drift it finds is counted); a watch that fails or ends relists "
        "at once",
    )
    add_leader_args(parser, name="gpupool-extender", does="binds")
    parser.add_argument(
        "--advertise-url",
        type=_http_url,
        default=None,
        help="with --leader-elect: the URL other replicas reach this one at (e.g. "
        "http://$(POD_IP):8888), written on the Lease while this replica leads; a replica that is "
        "not leader forwards /bind to the URL the leader wrote, or refuses it when there is none",
    )
    parser.add_argument(
        "--bind-forward-timeout-seconds",
        type=float,
        default=BIND_FORWARD_TIMEOUT_S,
        help="a bind forwarded to the leader that gets no reply within this is answered an error "
        "(keep it under kube-scheduler's extender httpTimeout)",
    )
    parser.add_argument("--max-binds", type=int, default=MAX_BINDS, help="binds in flight at once")
    parser.add_argument(
        "--bind-wait-seconds",
        type=float,
        default=BIND_WAIT_S,
        help="a bind that cannot start within this is refused (keep it under kube-scheduler's "
        "extender httpTimeout)",
    )
    parser.add_argument(
        "--tls-cert", type=Path, default=None, help="serve HTTPS with this certificate (PEM)"
    )
    parser.add_argument("--tls-key", type=Path, default=None, help="the --tls-cert's key (PEM)")
    parser.add_argument(
        "--client-ca",
        type=Path,
        default=None,
        help="with --tls-cert: take filter, prioritize and bind only from callers with a client "
        "certificate this CA signed, for a name in --allowed-client (kube-scheduler's "
        "extender tlsConfig certFile/keyFile). Without it anyone who reaches the port may call",
    )
    parser.add_argument(
        "--allowed-client",
        action="append",
        default=None,
        metavar="NAME",
        help=f"a client certificate's CN that may call (repeatable; default {SCHEDULER_NAME})",
    )
    parser.add_argument(
        "--compute-modes",
        default=DEFAULT_CONFIGMAP,
        type=_namespaced,
        metavar="NAMESPACE/NAME",
        help="the ConfigMap of compute-mode defaults per GPU model and pod class, read every "
        f"{INTERVAL_S:g}s; absent: no MPS unless a pod asks (docs/compute-modes.md; default "
        f"{DEFAULT_CONFIGMAP})",
    )
    parser.add_argument("--log-level", default="INFO")
    parser.set_defaults(func=run)


def client_context(args: argparse.Namespace) -> ssl.SSLContext:
    """How a standby forwards binds to the leader: the leader's serving certificate checked
    against --client-ca, this replica's --tls-cert as its client certificate (it needs the
    clientAuth usage and a CN in --allowed-client)."""
    context = ssl.create_default_context(cafile=str(args.client_ca))
    context.load_cert_chain(str(args.tls_cert), str(args.tls_key))
    context.check_hostname = False  # the leader is reached at its pod IP, not a name
    return context


def tls_problem(args: argparse.Namespace) -> str | None:
    if (args.tls_cert is None) != (args.tls_key is None):
        return "--tls-cert and --tls-key go together"
    if args.client_ca is not None and args.tls_cert is None:
        return "--client-ca needs --tls-cert and --tls-key (client certificates need TLS)"
    return None


def _http_url(text: str) -> str:
    """An http(s) URL with a host, without a trailing slash (the verb's path is appended)."""
    url = urllib.parse.urlsplit(text)
    if url.scheme not in ("http", "https") or not url.netloc:
        raise argparse.ArgumentTypeError(f"not an http(s) URL with a host: {text!r}")
    return text.rstrip("/")


async def serve(args: argparse.Namespace, stop: asyncio.Event) -> None:
    config = kube_config(args.kubeconfig)
    client = async_client(config, field_manager="gpupool-extender")
    if args.apply_crds:
        names = await apply_crds(client, args.crd_dir)
        log.info("CRDs applied: %s", ", ".join(names))
    cache = ClusterCache()
    metrics = Metrics()
    informer = Informer(
        client, cache, resync_s=args.resync_seconds, on_drift=metrics.record_drift, observer=metrics
    )
    poster = bind_poster(config, client)
    api: ExtenderApi = LightkubeExtenderApi(client, poster)
    # On election, forget the bind ledgers: what another leader bound is not known here.
    elector = elector_from_args(
        client, args, on_elected=lambda: extender.forget_ledgers(), advertise_url=args.advertise_url
    )
    leading: Callable[[], bool] = elector.is_leader if elector else (lambda: True)
    if elector is not None:  # a bind outliving the term writes nothing
        api = LeaderOnlyWrites(api, elector.is_leader)
    modes = ComputeModesWatch(client, args.compute_modes, leading=leading, clock=time.time)
    await modes.refresh()  # the first bind already sees the operators' settings
    extender = Extender(
        cache,
        api,
        policy=args.policy,
        max_binds=args.max_binds,
        bind_wait_s=args.bind_wait_seconds,
        compute_modes=modes.current,
    )
    app = make_app(
        extender,
        metrics=metrics,
        ready=informer.ready.is_set,
        is_leader=leading,
        leader_url=elector.leader_url if elector else (lambda: None),
        own_url=args.advertise_url,
        forward_timeout_s=args.bind_forward_timeout_seconds,
        callers=None
        if args.client_ca is None
        else frozenset(args.allowed_client or [SCHEDULER_NAME]),
        forward_ssl=None if args.client_ca is None else client_context(args),
    )
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    context = None
    if args.tls_cert is not None:
        context = server_context(args.tls_cert, args.tls_key, args.client_ca)
    site = web.TCPSite(runner, args.host, args.port, ssl_context=context)
    await site.start()
    scheme = "https" if context is not None else "http"
    log.info(
        "extender listening on %s://%s:%d (policy %s)", scheme, args.host, args.port, args.policy
    )
    if args.client_ca is None:
        log.warning(
            "no --client-ca: filter, prioritize and bind answer any caller that reaches the port"
        )
    tasks = [
        asyncio.ensure_future(informer.run(stop)),
        asyncio.ensure_future(modes.run(stop)),
        asyncio.ensure_future(
            extender.requeue_loop(stop, lambda: informer.ready.is_set() and leading())
        ),
    ]
    if elector is not None:
        tasks.append(asyncio.ensure_future(elector.run(stop)))
    try:
        await stop.wait()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await runner.cleanup()  # binds in flight finish before the lease is given up
        await extender.drain_leases()  # and the GpuLeases those binds left to create
        if elector is not None:
            await elector.release()
        await poster.close()


def _namespaced(text: str) -> str:
    namespace, slash, name = text.partition("/")
    if not (slash and namespace and name) or "/" in name:
        raise argparse.ArgumentTypeError(f"not NAMESPACE/NAME: {text!r}")
    return text


def run(args: argparse.Namespace) -> int:
    problem = leader_args_problem(args) or tls_problem(args)
    if problem is not None:
        print(f"gpupool extender: error: {problem}", file=sys.stderr)
        return 2
    configure_logging(args.log_level)

    async def main() -> None:
        stop = stop_on_signals()
        await serve(args, stop)

    run_loop(main())
    return 0
