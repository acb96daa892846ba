"""`gpupool dev-cluster up|down|status|restart|kubeconfig`: a real control plane on loopback.

Wiring only: the work is in `gpupool.devcluster`.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from gpupool.cli.daemon import configure_logging, stop_on_signals
from gpupool.devcluster import ClusterSpec, DevCluster, DevClusterError
from gpupool.devcluster.binaries import default_bin_dir
from gpupool.devcluster.cluster import default_state_dir
from gpupool.devcluster.nodes import (
    VGPU_PER_GPU,
    VGPU_RESOURCE,
    fake_node_from_domain,
    node_specs,
    parse_gpu_spec,
)
from gpupool.devcluster.realnode.fake_gpus import DEFAULT_GPUS
from gpupool.devcluster.realnode.node import RealNodeSpec
from gpupool.devcluster.scheduler_config import EXTENDER_WEIGHT, ExtenderConfig
from gpupool.devcluster.spec import ClusterState, GpupoolSpec, Ports
from gpupool.domain.devices import Node
from gpupool.domain.errors import GpupoolError
from gpupool.domain.heartbeat import DEFAULT_HEARTBEAT_S
from gpupool.simulator.openb import load_nodes
from gpupool.simulator.scenario import load_scenario


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the `dev-cluster` command and its subcommands."""
    parser = subparsers.add_parser(
        "dev-cluster",
        help="run a real Kubernetes control plane with fake GPU nodes on this machine",
        description=(
            "etcd, kube-apiserver, kube-scheduler and kwok on free 127.0.0.1 ports, with fake "
            "GPU nodes, and all of gpupool on top (CRDs, extender, webhook, controller, GpuNode "
            "heartbeats) unless --bare. Binaries come from `make k8s` (tools/k8s/build.sh)."
        ),
    )
    parser.set_defaults(func=lambda _args: _usage(parser))
    commands = parser.add_subparsers(dest="dev_cluster_command", metavar="COMMAND")

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--dir",
            type=Path,
            default=None,
            help=f"state folder (default: $GPUPOOL_DEV_CLUSTER_DIR or {default_state_dir()})",
        )

    up = commands.add_parser(
        "up", help="start the cluster, create the fake GPU nodes and run gpupool on it"
    )
    common(up)
    up.add_argument("--nodes", type=int, default=4, help="number of fake GPU nodes (default 4)")
    up.add_argument(
        "--gpus",
        default="8xA100-80GB",
        help=(
            "GPUs per node as COUNTxMODEL (default 8xA100-80GB); each card also advertises "
            f"{VGPU_PER_GPU} {VGPU_RESOURCE}"
        ),
    )
    up.add_argument(
        "--cluster-file",
        type=Path,
        default=None,
        help=(
            "create the nodes of a cluster file in one of the simulator's formats instead of "
            "--nodes/--gpus: a YAML scenario (its `cluster:` part) or an openb node list CSV "
            "(sn,cpu_milli,memory_mib,gpu,model)"
        ),
    )
    up.add_argument(
        "--bin-dir",
        type=Path,
        default=None,
        help=f"folder of the binaries (default: $GPUPOOL_K8S_BIN or {default_bin_dir()})",
    )
    up.add_argument(
        "--bare",
        action="store_true",
        help="only the Kubernetes control plane and the fake nodes: no CRDs and no gpupool "
        "component (kube-scheduler is plain unless --extender-url)",
    )
    up.add_argument(
        "--extender-url",
        default=None,
        help="make kube-scheduler call a scheduler extender you run yourself at this URL prefix "
        "(then `up` starts none)",
    )
    up.add_argument(
        "--policy",
        default="gpupool",
        help="the extender's default placement policy (default: gpupool)",
    )
    up.add_argument(
        "--heartbeat",
        type=float,
        default=DEFAULT_HEARTBEAT_S,
        metavar="SECONDS",
        help="how often the fake node agents renew their nodes' Leases (default: "
        f"{DEFAULT_HEARTBEAT_S:g}, as gpupool agent's --heartbeat)",
    )
    up.add_argument(
        "--suspect-after",
        type=float,
        default=None,
        metavar="SECONDS",
        help="the controller's --suspect-after (default: the controller's, 90)",
    )
    up.add_argument(
        "--lost-after",
        type=float,
        default=None,
        metavar="SECONDS",
        help="the controller's --lost-after (default: the controller's, 180)",
    )
    up.add_argument(
        "--real-node",
        action="store_true",
        help="also run one real node on this machine (root; kubelet, containerd, runc; see "
        "docs/real-node.md), with gpupool's agent serving its fake GPUs unless --bare",
    )
    up.add_argument(
        "--real-node-gpus",
        default=DEFAULT_GPUS,
        help=f"the real node's fake cards (default {DEFAULT_GPUS}; 8 at most, each named as the "
        "project's fake CUDA driver names it)",
    )
    up.add_argument(
        "--extender-weight",
        type=int,
        default=EXTENDER_WEIGHT,
        help=f"the extender's priority weight (default {EXTENDER_WEIGHT}: docs/extender.md)",
    )
    up.add_argument("--apiserver-port", type=int, default=None, help="default: a free port")
    up.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds each component may take to be ready; the waits that grow with the "
        "cluster (nodes Ready, GpuNodes beating) allow this long without one more, and this "
        "plus 0.5 s per node in all",
    )
    up.add_argument(
        "--foreground",
        action="store_true",
        help="stay in the foreground and stop the cluster on Ctrl-C or SIGTERM",
    )
    up.set_defaults(func=_guard(_up))

    down = commands.add_parser("down", help="stop every process the cluster started")
    common(down)
    down.set_defaults(func=_guard(_down))

    restart = commands.add_parser(
        "restart",
        help="stop one component (if it still runs) and start it again, known to `down`",
    )
    common(restart)
    restart.add_argument("component", help="its name as `status` shows it, e.g. kwok")
    restart.set_defaults(func=_guard(_restart))

    status = commands.add_parser("status", help="show the components and whether they run")
    common(status)
    status.set_defaults(func=_guard(_status))

    kubeconfig = commands.add_parser(
        "kubeconfig",
        help="print the admin kubeconfig's path, or write one for --user and print its path",
        description=(
            "Without --user: the admin kubeconfig (system:masters, past RBAC). With --user: a "
            "new client certificate from the cluster's CA for that user name and --group(s), "
            "so RBAC treats you as them, e.g. `--user alice --group team-a-developers` (a "
            "tenant; bind it with deploy/rbac/tenant.yaml) or `--group gpupool-quota-admins`."
        ),
    )
    common(kubeconfig)
    kubeconfig.add_argument("--user", default=None, help="the user name (certificate CN)")
    kubeconfig.add_argument(
        "--group",
        action="append",
        default=[],
        help="a group of the user (certificate O; repeatable)",
    )
    kubeconfig.set_defaults(func=_guard(_kubeconfig))

    heartbeat = commands.add_parser(
        "heartbeat",
        help="publish a GpuNode per fake GPU node and keep its Lease renewed (`up` starts it)",
        description=(
            "The dev cluster's stand-in for `gpupool agent` on every kwok node (a device plugin "
            "needs a kubelet, which kwok nodes lack): every --interval seconds, each node "
            "labelled type=kwok with gpupool.io/gpu-model gets its heartbeat Lease renewed "
            "(namespace gpupool-node-lease) and the GpuNode status that "
            "`gpupool agent --fake-gpus` would write (written only when it differs), and the "
            "agent's OtherGpuPath condition (another device plugin or DRA driver on the node). "
            "Annotate a GpuNode gpupool.io/fake-heartbeat=paused to stop its heartbeat."
        ),
    )
    heartbeat.add_argument("--kubeconfig", type=Path, default=None)
    heartbeat.add_argument("--interval", type=float, default=DEFAULT_HEARTBEAT_S, metavar="SECONDS")
    heartbeat.add_argument("--log-level", default="INFO")
    heartbeat.set_defaults(func=_heartbeat)

    agent = commands.add_parser(
        "agent",
        help="`gpupool agent` for the real node (`up --real-node` starts it)",
        description=(
            "`gpupool agent` with a fake inventory whose cards carry the uuids of the project's "
            "fake CUDA driver (native/), so the limiter in a container on the real node finds "
            "its card. Takes `gpupool agent`'s flags."
        ),
    )
    _agent_flags(agent)
    agent.set_defaults(func=_agent)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


_Handler = Callable[[argparse.Namespace], int]


def _guard(handler: _Handler) -> _Handler:
    def run(args: argparse.Namespace) -> int:
        try:
            code: int = handler(args)
        except (DevClusterError, GpupoolError) as err:
            print(f"gpupool dev-cluster: error: {err}", file=sys.stderr)
            return 1
        return code

    return run


class _Terminated(BaseException):
    """SIGTERM, turned into an exception so that the cleanup paths run."""


def _raise_terminated(_signum: int, _frame: FrameType | None) -> None:
    raise _Terminated


def _up(args: argparse.Namespace) -> int:
    if args.cluster_file is not None:
        nodes = [fake_node_from_domain(node) for node in _cluster_file_nodes(args.cluster_file)]
        shape = f"from {args.cluster_file}"
    else:
        nodes = node_specs(args.nodes, parse_gpu_spec(args.gpus))
        shape = f"× {parse_gpu_spec(args.gpus)}"
    extender = (
        ExtenderConfig(url_prefix=args.extender_url, weight=args.extender_weight)
        if args.extender_url
        else None
    )
    if args.heartbeat <= 0:
        print("gpupool dev-cluster: error: --heartbeat must be positive", file=sys.stderr)
        return 2
    gpupool = (
        None
        if args.bare
        else GpupoolSpec(
            policy=args.policy,
            run_extender=extender is None,
            heartbeat_s=args.heartbeat,
            suspect_after_s=args.suspect_after,
            lost_after_s=args.lost_after,
        )
    )
    real_node = RealNodeSpec(gpus=parse_gpu_spec(args.real_node_gpus)) if args.real_node else None
    spec = ClusterSpec(
        real_node=real_node,
        nodes=tuple(nodes),
        extender=extender,
        gpupool=gpupool,
        ports=Ports(apiserver=args.apiserver_port),
        ready_timeout_s=args.timeout,
    )
    cluster = DevCluster(args.dir, args.bin_dir)
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        started = time.monotonic()
        try:
            state = cluster.up(spec)
        except (KeyboardInterrupt, _Terminated):
            print("gpupool dev-cluster: interrupted; stopped what had started", file=sys.stderr)
            return 130
        if not args.foreground:
            signal.signal(signal.SIGTERM, previous)  # up is done: the cluster outlives us
            _summary(args, cluster, state, shape, time.monotonic() - started)
            print(
                "  stop with:  gpupool dev-cluster down"
                + (f" --dir {args.dir}" if args.dir else "")
            )
            return 0
        # Foreground: from here on any exit, Ctrl-C or SIGTERM included, stops the cluster.
        try:
            _summary(args, cluster, state, shape, time.monotonic() - started)
            print("running in the foreground; Ctrl-C stops the cluster", flush=True)
            while True:
                time.sleep(3600)
        except (KeyboardInterrupt, _Terminated):
            pass
        finally:
            stopped = cluster.down()
            print(f"stopped: {', '.join(stopped) or 'nothing was running'}", flush=True)
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)


def _summary(
    args: argparse.Namespace, cluster: DevCluster, state: ClusterState, shape: str, elapsed: float
) -> None:
    print(f"dev cluster up in {elapsed:.1f}s: {state.server}")
    print(f"  nodes:      {len(state.nodes)} {shape} (label type=kwok)")
    if state.real_node:
        print(f"  real node:  {state.real_node} (kubelet, containerd, runc; label type=real)")
    print(f"  scheduler:  {'extender ' + state.extender_url if state.extender_url else 'plain'}")
    gpupool = [p.name for p in state.processes if p.name.startswith("gpupool-")]
    print(f"  gpupool:    {', '.join(gpupool) if gpupool else 'not running (--bare)'}")
    if state.web_url:
        print(f"  web view:   {state.web_url} (no token: the operator's view; dev only)")
    print(f"  kubeconfig: {state.kubeconfig}")
    print(f"  logs:       {cluster.log_dir}")
    print(f"  try:        {state.bin_dir}/kubectl --kubeconfig {state.kubeconfig} get nodes")


def _cluster_file_nodes(path: Path) -> list[Node]:
    if path.suffix.lower() in (".yaml", ".yml"):
        return list(load_scenario(path).nodes)
    return load_nodes(path)


def _down(args: argparse.Namespace) -> int:
    stopped = DevCluster(args.dir).down()
    print(f"stopped: {', '.join(stopped)}" if stopped else "no dev cluster was running")
    return 0


def _restart(args: argparse.Namespace) -> int:
    record = DevCluster(args.dir).restart(args.component)
    print(f"restarted {record.name}: pid {record.pid}, log {record.log}")
    return 0


def _status(args: argparse.Namespace) -> int:
    cluster = DevCluster(args.dir)
    components = cluster.status()
    if not components:
        print(f"no dev cluster in {cluster.state_dir}")
        return 1
    state = cluster.load_state()
    assert state is not None
    print(f"server:     {state.server}")
    print(f"kubeconfig: {state.kubeconfig}")
    for c in components:
        print(f"  {c.name:<18} pid {c.pid:<8} {'running' if c.running else 'STOPPED':<8} {c.log}")
    return 0 if all(c.running for c in components) else 1


def _kubeconfig(args: argparse.Namespace) -> int:
    cluster = DevCluster(args.dir)
    if args.user is None:
        if args.group:
            print("gpupool dev-cluster kubeconfig: error: --group needs --user", file=sys.stderr)
            return 2
        print(cluster.running_state().kubeconfig)
        return 0
    print(cluster.user_kubeconfig(args.user, tuple(args.group)))
    return 0


def _heartbeat(args: argparse.Namespace) -> int:
    from gpupool.devcluster.heartbeat import run_heartbeats

    if args.interval <= 0:
        print("gpupool dev-cluster heartbeat: error: --interval must be positive", file=sys.stderr)
        return 2
    configure_logging(args.log_level)

    async def main() -> None:
        stop = stop_on_signals()
        await run_heartbeats(args.kubeconfig, stop, interval_s=args.interval)

    asyncio.run(main())
    return 0


def _agent_flags(parser: argparse.ArgumentParser) -> None:
    """`gpupool agent`'s own flags, taken from its parser so the two never drift apart."""
    from gpupool.cli import agent as agent_cli

    holder = argparse.ArgumentParser(add_help=False)
    agent_cli.register(holder.add_subparsers())
    agent_parser = next(
        action.choices["agent"]
        for action in holder._actions
        if isinstance(action, argparse._SubParsersAction)
    )
    for action in agent_parser._actions:
        if action.option_strings and "--help" not in action.option_strings:
            parser._add_action(action)


def _agent(args: argparse.Namespace) -> int:
    from gpupool.cli import agent as agent_cli
    from gpupool.devcluster.realnode.fake_gpus import driver_matched_inventory
    from gpupool.node.agent import NodeAgent
    from gpupool.node.device_plugin.server import DevicePluginServer

    if not args.node_name or not args.fake_gpus:
        print(
            "gpupool dev-cluster agent: error: needs --node-name and --fake-gpus", file=sys.stderr
        )
        return 2
    try:
        inventory = driver_matched_inventory(args.fake_gpus, node=args.node_name)
    except GpupoolError as err:
        print(f"gpupool dev-cluster agent: error: {err}", file=sys.stderr)
        return 2
    configure_logging(args.log_level)

    async def main() -> None:
        stop = stop_on_signals()
        plugin = DevicePluginServer(
            agent_cli.plugin_config(args), inventory, agent_cli.lease_source(args)
        )
        node_agent = NodeAgent(
            node=args.node_name,
            plugin=plugin,
            reporter=agent_cli.gpu_node_reporter(args),
            reserve_pct=args.reserve_pct,
            heartbeat_s=args.heartbeat,
        )
        if args.dra:  # the DRA driver beside the device plugin, as `gpupool agent --dra`
            dra = agent_cli.dra_node(args, inventory)
            await asyncio.gather(node_agent.run(stop), dra.run(stop))
        else:
            await node_agent.run(stop)

    asyncio.run(main())
    return 0
