"""`gpupool demo` (`make demo`): the product on the dev cluster. Brings up the control plane with
fake GPU nodes and all of gpupool (the web view too), plays the built-in demo's tenants and
timeline (`simulator/demo/`, the same data `gpupool simulate replay --demo` replays), shows each
step in `gpupool status`, and tears everything down on Ctrl-C, or after the last step with
`--once`. Wiring only: the cluster is `devcluster`, the pods and quotas `devcluster.demo`, the
status the terminal views' own code."""

from __future__ import annotations

import argparse
import asyncio
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpupool.adapters.kubeclient import async_client
from gpupool.adapters.kubernetes.views_read import read_views
from gpupool.cli import views_text
from gpupool.devcluster import ClusterSpec, DevCluster
from gpupool.devcluster import demo as live
from gpupool.devcluster.cluster import default_state_dir
from gpupool.devcluster.nodes import fake_node_from_domain
from gpupool.devcluster.spec import GpupoolSpec
from gpupool.quota.resource import Resource
from gpupool.simulator.demo_scenario import DEMO_DIR, load_demo
from gpupool.simulator.tenants_yaml import load_tenancy
from gpupool.state.views.status import StatusView, build_status

# Short node-health and resync times, so a step shows within a second or two.
DEMO = GpupoolSpec(heartbeat_s=2.0, controller_resync_s=1.0)
SETTLE_S = 30.0  # the longest a step waits for its pods to be placed or queued
EVERY_S = 15.0  # after the last step, how often the status is shown again


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="the product on a local dev cluster: four tenants sharing fake GPUs, live",
        description=(
            "Starts the dev cluster with fake GPU nodes and all of gpupool, plays the built-in "
            "multi-tenant demo (inference slices, quarter-card notebooks, a training job of "
            "whole GPUs borrowing an idle tenant's quota and reclaimed when it comes back), prints "
            "`gpupool status` after each step and the web view's URL; Ctrl-C stops it and "
            "takes the cluster down."
        ),
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="the demo cluster's state folder (default: next to the dev cluster's, .../demo)",
    )
    parser.add_argument("--once", action="store_true", help="stop after the scenario's end")
    parser.set_defaults(func=run)


def _amount(value: int, resource: Resource) -> str:
    if resource is Resource.GPU:
        return f"{value / 1000:g} GPUs"
    return f"{value / 2**30:g}Gi"


def _say(started: float, text: str) -> None:
    print(f"[{time.monotonic() - started:6.1f}s] {text}", flush=True)


def _view(kubeconfig: Path) -> StatusView:
    async def read() -> StatusView:
        client = async_client(kubeconfig, field_manager="gpupool-demo")
        try:
            return build_status(await read_views(client), time.time())
        finally:
            await client.close()

    return asyncio.run(read())


def _wait(check: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def _settled(kubeconfig: Path, pods: list[str]) -> Callable[[], bool]:
    """Every pod named either holds a slice or waits at the quota gate with a reason."""

    def check() -> bool:
        view = _view(kubeconfig)
        placed = {s.pod for n in view.pool.nodes for c in n.cards for s in c.slices}
        gated = {q.pod for q in view.queue if q.stage == "quota" and q.position is not None}
        return all(p in placed or p in gated for p in pods)

    return check


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    # Ctrl-C, and SIGTERM (a supervisor, `kill`), take the cluster down; SIGINT explicitly, as a
    # shell that starts the demo in the background leaves it ignored.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    started = time.monotonic()
    demo = load_demo()
    state_dir = args.dir or default_state_dir().parent / "demo"
    cluster = DevCluster(state_dir)
    shape = (
        f"{len(demo.nodes)} nodes, {len(demo.requests)} pods of {len(demo.tenancy.rules)} tenants"
    )
    _say(started, f"{demo.name}: {shape}; bringing up the dev cluster in {state_dir}")
    spec = ClusterSpec(
        nodes=tuple(fake_node_from_domain(n) for n in demo.nodes),
        gpupool=DEMO,
        ready_timeout_s=120.0,
    )
    state = cluster.up(spec, die_with_parent=True)  # stops what it started if it fails
    try:
        kubeconfig = Path(state.kubeconfig)
        _say(started, f"dev cluster up: {state.server}, gpupool running")
        _say(started, f"web view: {state.web_url}  (the operator's view; no token needed here)")
        _say(started, f"kubeconfig: {kubeconfig}  (gpupool status --kubeconfig {kubeconfig})")
        api = cluster.api()
        totals = _view(kubeconfig).pool.totals  # the percentages are of the live pool
        capacity = {Resource.GPU: totals.cards * 1000, Resource.GPU_MEMORY: totals.memory_bytes}
        tenancy = load_tenancy(DEMO_DIR / "tenants.yaml", capacity)
        live.apply_tenants(api, [r.quota for r in tenancy.rules])
        _say(started, "tenants: " + ", ".join(
            f"{r.quota.name} ({_amount(r.quota.nominal, r.quota.resource)})" for r in tenancy.rules
        ))  # fmt: skip
        t0 = time.monotonic()
        for step in demo.steps:
            time.sleep(max(0.0, step.at_s - (time.monotonic() - t0)))
            _say(started, f"step at {step.at_s:g}s: {step.say}")
            for req in step.start:
                live.start_pod(api, req)
            keys = [f"{r.tenant}/{r.name}" for r in step.start]
            if not _wait(_settled(kubeconfig, keys), SETTLE_S):
                _say(started, "(some pods are still being scheduled)")
            print(views_text.render_status(_view(kubeconfig)), end="", flush=True)
        while True:
            left = demo.end_s - (time.monotonic() - t0)
            if args.once and left <= 0:
                break
            time.sleep(min(EVERY_S, left) if args.once else EVERY_S)
            _say(started, "status:")
            print(views_text.render_status(_view(kubeconfig)), end="", flush=True)
    except KeyboardInterrupt:
        print("", flush=True)
        _say(started, "interrupted")
    finally:
        stopped = cluster.down()
        _say(started, f"stopped: {', '.join(stopped) or 'nothing was running'}")
    return 0
