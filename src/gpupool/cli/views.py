"""`gpupool status`, `gpupool queue`, `gpupool leases` (also `kubectl gpupool ...`): the pool, the
admission queue and the leases as the cluster holds them, read through the kubeconfig (wiring:
the read is `adapters.kubernetes.views_read`, the values `state.views`, the text `views_text`)."""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

from gpupool.adapters import views_json
from gpupool.adapters.kubeclient import async_client
from gpupool.adapters.kubernetes.views_read import read_views
from gpupool.cli import views_text
from gpupool.state.views.status import StatusView, ViewInputs, build_status


def status_of(inputs: ViewInputs, now: float) -> StatusView:
    return build_status(inputs, now)


async def _read(args: argparse.Namespace) -> ViewInputs:
    client = async_client(args.kubeconfig, field_manager="gpupool-views")
    try:
        tenants = (args.tenant,) if args.tenant else ()
        return await read_views(client, tuple(args.namespace or ()), tenants)
    finally:
        await client.close()


def _view(args: argparse.Namespace) -> StatusView:
    view = status_of(asyncio.run(_read(args)), time.time())
    if getattr(args, "node", None):
        view.check_node(args.node)
    if args.tenant:
        view.check_tenant(args.tenant)
    return view


def run_status(args: argparse.Namespace) -> int:
    view = _view(args)
    if args.output == "json":
        text = views_json.status_json(view, args.node, args.tenant)
    elif args.node:
        text = views_text.render_node(view, args.node)
    elif args.tenant:
        text = views_text.render_tenant(view, args.tenant)
    else:
        text = views_text.render_status(view)
    print(text, end="")
    return 0


def run_queue(args: argparse.Namespace) -> int:
    view = _view(args)
    if args.output == "json":
        print(views_json.queue_json(view, args.tenant), end="")
    else:
        print(views_text.render_queue(view, args.tenant), end="")
    return 0


def run_leases(args: argparse.Namespace) -> int:
    view = _view(args)
    if args.output == "json":
        print(views_json.leases_json(view, args.tenant), end="")
    else:
        print(views_text.render_leases(view, args.tenant), end="")
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--kubeconfig", type=Path, default=None, help="default: $KUBECONFIG, ~/.kube/config"
    )
    p.add_argument(
        "-n",
        "--namespace",
        action="append",
        metavar="NS",
        help="read only this namespace (repeat for more); a tenant without cluster-wide "
        "rights gets its kubeconfig context's namespace",
    )
    p.add_argument("--tenant", metavar="NAME", help="only this tenant")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")


def register(sub: Any) -> None:
    p = sub.add_parser("status", help="the pool: nodes, cards, slices, tenants' quota use")
    _common(p)
    p.add_argument("--node", metavar="NAME", help="one node's cards and slices")
    p.set_defaults(func=run_status)
    p = sub.add_parser("queue", help="pods waiting for quota or a card, in admission order")
    _common(p)
    p.set_defaults(func=run_queue)
    p = sub.add_parser("leases", help="live and recent GpuLeases with GiB-hours")
    _common(p)
    p.set_defaults(func=run_leases)
