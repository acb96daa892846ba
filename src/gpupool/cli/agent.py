"""`gpupool agent`: the node agent (GPU discovery, the kubelet device plugin, the GpuNode report).

Wiring only: discovery is in `gpupool.node.nvml`, the plugin in
`gpupool.node.device_plugin`, the loops in `gpupool.node.agent`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from gpupool.adapters.metrics.agent import AgentCollector, AgentReading
from gpupool.adapters.metrics.http import parse_address, start_metrics_server
from gpupool.adapters.wire.names import DRA_DRIVER
from gpupool.cli.daemon import configure_logging, stop_on_signals
from gpupool.domain.errors import GpupoolError
from gpupool.domain.gpu_paths import PathFinding
from gpupool.domain.heartbeat import DEFAULT_HEARTBEAT_S
from gpupool.domain.reserve import DEFAULT_RESERVE_PCT
from gpupool.node.agent import NodeAgent
from gpupool.node.device_plugin.decide import PluginPaths, allocation_key
from gpupool.node.device_plugin.server import (
    DEFAULT_PLUGIN_DIR,
    RESOURCE_NAME,
    DevicePluginServer,
    PluginConfig,
)
from gpupool.node.device_plugin.sources import UnwiredAllocationSource
from gpupool.node.dra.cdi import DEFAULT_CDI_DIR
from gpupool.node.dra.checkpoint import CheckpointStore
from gpupool.node.dra.plugin import (
    DEFAULT_PLUGINS_DIR,
    DEFAULT_REGISTRY_DIR,
    DraPluginConfig,
    DraPluginServer,
)
from gpupool.node.dra.prepare import ClaimPreparer, PrepareSettings
from gpupool.node.dra.runner import DraNode
from gpupool.node.dra.slices import SliceSettings
from gpupool.node.limiter_usage import UsageFileError, read_usage, usage_file
from gpupool.node.nvml import FakeInventory, NvmlInventory
from gpupool.ports import (
    AllocationSource,
    ContainerUsage,
    GpuNodeReporter,
    GpuPathChecker,
    Inventory,
    LeaseSourceUnavailable,
    PodLease,
)

log = logging.getLogger("gpupool.agent")
_DEFAULT_PATHS = PluginPaths()
DEFAULT_METRICS_ADDRESS = ":9410"
DEFAULT_DRA_STATE_DIR = Path("/var/lib/gpupool/dra")


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the `agent` command."""
    parser = subparsers.add_parser(
        "agent",
        help="run the node agent: GPU discovery and the kubelet device plugin for gpupool.io/vgpu",
        description=(
            "Discovers the node's GPUs with NVML (or takes them from --fake-gpus on kwok nodes and "
            "in tests), serves the kubelet device plugin for gpupool.io/vgpu, and keeps "
            "--reserve-pct of each card out of slices."
        ),
    )
    parser.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME"),
        help="this node's Kubernetes name (default: $NODE_NAME)",
    )
    parser.add_argument(
        "--fake-gpus",
        metavar="SPEC",
        help="describe the cards instead of asking NVML, e.g. 8xA100-80GB or 2xH800,1xT4",
    )
    parser.add_argument(
        "--device-plugin-dir",
        type=Path,
        default=DEFAULT_PLUGIN_DIR,
        help=f"the kubelet's device-plugin folder (default: {DEFAULT_PLUGIN_DIR})",
    )
    parser.add_argument(
        "--limiter-path",
        default=_DEFAULT_PATHS.limiter_host,
        help=f"libgpupool.so on the host (default: {_DEFAULT_PATHS.limiter_host})",
    )
    parser.add_argument(
        "--limits-dir",
        default=_DEFAULT_PATHS.limits_host_dir,
        help=f"host folder for the per-container limits files (default: "
        f"{_DEFAULT_PATHS.limits_host_dir})",
    )
    parser.add_argument(
        "--usage-dir",
        default=_DEFAULT_PATHS.usage_host_dir,
        help=f"host folder for the per-container folders where the limiter keeps its memory "
        f"accounting, which /metrics reads (default: {_DEFAULT_PATHS.usage_host_dir})",
    )
    parser.add_argument(
        "--mps-pipe-dir",
        default=_DEFAULT_PATHS.mps_pipe_host,
        help=f"the MPS control daemon's pipe folder on the host (default: "
        f"{_DEFAULT_PATHS.mps_pipe_host})",
    )
    parser.add_argument(
        "--preload",
        choices=("env", "file"),
        default="env",
        help="load the limiter with LD_PRELOAD (env) or a mounted /etc/ld.so.preload (file), "
        "which also binds shells started with a clean environment (default: env)",
    )
    parser.add_argument(
        "--reserve-pct",
        type=float,
        default=DEFAULT_RESERVE_PCT,
        help=f"share of each card kept out of slices, percent (default: {DEFAULT_RESERVE_PCT:g})",
    )
    parser.add_argument(
        "--vgpu-per-card",
        type=int,
        default=10,
        help=f"{RESOURCE_NAME} devices offered per card: the most pods sharing one (default: 10)",
    )
    parser.add_argument(
        "--ignore-xids",
        default="",
        metavar="LIST",
        help="XID errors, comma-separated, that must not mark a card unhealthy",
    )
    parser.add_argument(
        "--heartbeat",
        type=float,
        default=DEFAULT_HEARTBEAT_S,
        metavar="SECONDS",
        help=(
            "heartbeat period: the node's Lease is renewed this often (the GpuNode is written "
            f"only when its report changes) (default: {DEFAULT_HEARTBEAT_S:g})"
        ),
    )
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        default=os.environ.get("KUBECONFIG") or None,
        help="API server access for GpuLeases and the GpuNode (default: $KUBECONFIG, else the "
        "in-cluster service account; neither: leases and GpuNode are not wired)",
    )
    parser.add_argument(
        "--metrics-address",
        default=DEFAULT_METRICS_ADDRESS,
        metavar="HOST:PORT",
        help="serve Prometheus /metrics here (cards and this node's leases; docs/metrics.md); "
        f"'off' serves none (default: {DEFAULT_METRICS_ADDRESS})",
    )
    parser.add_argument(
        "--dra",
        action="store_true",
        help="also run the DRA driver gpu.gpupool.io (a first draft, docs/dra.md): publish this "
        "node's ResourceSlice and serve the kubelet's DRA plugin; needs an API server",
    )
    parser.add_argument(
        "--dra-state-dir",
        type=Path,
        default=DEFAULT_DRA_STATE_DIR,
        help=f"with --dra: the folder of prepared claims' checkpoints (default: "
        f"{DEFAULT_DRA_STATE_DIR})",
    )
    parser.add_argument(
        "--kubelet-plugins-dir",
        type=Path,
        default=DEFAULT_PLUGINS_DIR,
        help=f"with --dra: the kubelet's plugin folder; the DRA socket goes in its "
        f"{DRA_DRIVER}/ (default: {DEFAULT_PLUGINS_DIR})",
    )
    parser.add_argument(
        "--kubelet-registry-dir",
        type=Path,
        default=DEFAULT_REGISTRY_DIR,
        help=f"with --dra: the kubelet's plugin registration folder (default: "
        f"{DEFAULT_REGISTRY_DIR})",
    )
    parser.add_argument(
        "--cdi-dir",
        default=DEFAULT_CDI_DIR,
        help=f"with --dra: where the claims' CDI specs are written (default: {DEFAULT_CDI_DIR})",
    )
    parser.add_argument("--log-level", default="INFO", help="logging level (default: INFO)")
    parser.set_defaults(func=run)


def build_inventory(args: argparse.Namespace) -> Inventory:
    if args.fake_gpus:
        return FakeInventory.from_spec(args.fake_gpus, node=args.node_name)
    ignored = [int(x) for x in args.ignore_xids.replace(" ", "").split(",") if x]
    return NvmlInventory(ignored_xids=ignored)


def plugin_config(args: argparse.Namespace) -> PluginConfig:
    return PluginConfig(
        node=args.node_name,
        plugin_dir=args.device_plugin_dir,
        per_card=args.vgpu_per_card,
        reserve_pct=args.reserve_pct,
        paths=PluginPaths(
            limiter_host=args.limiter_path,
            limits_host_dir=args.limits_dir,
            usage_host_dir=args.usage_dir,
            mps_pipe_host=args.mps_pipe_dir,
            preload=args.preload,
        ),
    )


def _has_api_server(args: argparse.Namespace) -> bool:
    kubeconfig = getattr(args, "kubeconfig", None)
    return bool(kubeconfig) or bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def lease_source(args: argparse.Namespace) -> AllocationSource:
    """GpuLease objects on this node when an API server is configured (--kubeconfig or in
    cluster); otherwise Allocate answers UNAVAILABLE saying the lease source is not wired."""
    if not _has_api_server(args):
        return UnwiredAllocationSource()
    from gpupool.adapters.kubeclient import async_client
    from gpupool.adapters.kubernetes.lease_source import KubernetesAllocationSource

    return KubernetesAllocationSource(async_client(args.kubeconfig, field_manager="gpupool-agent"))


def gpu_node_reporter(args: argparse.Namespace) -> GpuNodeReporter | None:
    """The GpuNode publisher when an API server is configured; None otherwise."""
    if not _has_api_server(args):
        return None
    from gpupool.adapters.kubeclient import async_client
    from gpupool.adapters.kubernetes.node_lease import lease_duration_s
    from gpupool.adapters.kubernetes.reporter import KubernetesGpuNodeReporter

    return KubernetesGpuNodeReporter(
        async_client(args.kubeconfig, field_manager="gpupool-agent"),
        lease_duration_s=lease_duration_s(args.heartbeat),
    )


def gpu_path_checker(args: argparse.Namespace) -> GpuPathChecker | None:
    """The look for other paths handing out this node's cards, when an API server is
    configured (docs/dra.md, "One node, which path"): it watches the node's Node, the
    ResourceSlices on it and its GpuNode, and decides again when one of them changes."""
    if not _has_api_server(args):
        return None
    from gpupool.adapters.kubeclient import async_client
    from gpupool.adapters.kubernetes.gpu_paths import GpuPathWatch

    client = async_client(args.kubeconfig, field_manager="gpupool-agent")
    return GpuPathWatch(client, args.node_name)


def _check(args: argparse.Namespace) -> str | None:
    if not args.node_name:
        return "--node-name is required (or set $NODE_NAME, e.g. from the downward API)"
    if args.vgpu_per_card < 1:
        return f"--vgpu-per-card must be 1 or more; got {args.vgpu_per_card}"
    if not 0 <= args.reserve_pct < 100:
        return f"--reserve-pct must be from 0 to below 100; got {args.reserve_pct:g}"
    bad = [x for x in args.ignore_xids.replace(" ", "").split(",") if x and not x.isdigit()]
    if bad:
        return f"--ignore-xids takes numbers separated by commas; got {args.ignore_xids!r}"
    if args.metrics_address != "off":
        try:
            parse_address(args.metrics_address)
        except ValueError as err:
            return f"--metrics-address: {err}"
    if getattr(args, "dra", False) and not _has_api_server(args):
        return (
            "--dra needs an API server to read claims and publish the ResourceSlice: give "
            "--kubeconfig or run in the cluster"
        )
    return None


def leases_usage(usage_dir: Path, leases: tuple[PodLease, ...]) -> dict[str, ContainerUsage]:
    """What each lease's container limiter reports, for the leases whose devices are recorded
    (the usage folder is named from them); a file that cannot be read is logged and left out."""
    found: dict[str, ContainerUsage] = {}
    for lease in leases:
        if not lease.device_ids:
            continue
        path = usage_file(usage_dir, allocation_key(lease.device_ids))
        try:
            usage = read_usage(path)
        except (OSError, UsageFileError) as err:
            log.warning("lease %s: cannot read the limiter's accounting: %s", lease.lease, err)
            continue
        if usage is not None:
            found[lease.lease] = usage
    return found


def metrics_refresher(
    node: str,
    inventory: Inventory,
    source: AllocationSource,
    collector: AgentCollector,
    usage_dir: Path | None = None,
    paths: Callable[[], PathFinding | None] = lambda: None,
) -> Callable[[], Awaitable[None]]:
    """What a scrape reads: the cards and their readings now, the leases on this node, what
    their containers' limiters report (from `usage_dir`; None: not read), and the agent's last
    look for other GPU paths (`paths`)."""

    async def refresh() -> None:
        try:
            leases: tuple[PodLease, ...] | None = await source.leases_on(node)
        except LeaseSourceUnavailable:
            leases = None
        usage = leases_usage(usage_dir, leases) if usage_dir is not None and leases else {}
        collector.update(
            AgentReading(node, inventory.devices(), inventory.telemetry(), leases, usage, paths())
        )

    return refresh


def dra_node(args: argparse.Namespace, inventory: Inventory) -> DraNode:
    """The DRA driver's node side (--dra), with the device plugin's host paths."""
    from gpupool.adapters.kubeclient import async_client
    from gpupool.node.dra.kube import (
        KubernetesClaimSource,
        ResourceSlicePublisher,
        container_runtime,
    )

    client = async_client(args.kubeconfig, field_manager="gpupool-agent")
    settings = PrepareSettings(
        node=args.node_name,
        reserve_pct=args.reserve_pct,
        paths=plugin_config(args).paths,
        cdi_dir=args.cdi_dir,
    )
    preparer = ClaimPreparer(
        settings, inventory, KubernetesClaimSource(client), CheckpointStore(args.dra_state_dir)
    )
    config = DraPluginConfig(
        plugin_dir=args.kubelet_plugins_dir / DRA_DRIVER, registry_dir=args.kubelet_registry_dir
    )
    slices = SliceSettings(args.node_name, args.reserve_pct, args.vgpu_per_card)
    return DraNode(
        DraPluginServer(config, preparer, health_interval_s=args.heartbeat),
        ResourceSlicePublisher(client, slices),
        inventory,
        args.heartbeat,
        lambda: container_runtime(client, args.node_name),
    )


async def run_agent(args: argparse.Namespace, stop: asyncio.Event) -> None:
    """Build the agent from parsed arguments and run it until `stop` is set."""
    inventory = build_inventory(args)
    gpus = inventory.devices()
    log.info(
        "node %s: %d card(s): %s",
        args.node_name,
        len(gpus),
        ", ".join(f"{g.index}:{g.model}:{g.uuid}" for g in gpus) or "none",
    )
    source = lease_source(args)
    plugin = DevicePluginServer(plugin_config(args), inventory, source)
    agent = NodeAgent(
        node=args.node_name,
        plugin=plugin,
        reporter=gpu_node_reporter(args),
        reserve_pct=args.reserve_pct,
        heartbeat_s=args.heartbeat,
        paths=gpu_path_checker(args),
    )
    runner = None
    if args.metrics_address != "off":
        collector = AgentCollector(args.node_name)
        registry = CollectorRegistry()
        registry.register(collector)
        refresh = metrics_refresher(
            args.node_name,
            inventory,
            source,
            collector,
            Path(args.usage_dir),
            lambda: agent.paths_found,
        )
        runner = await start_metrics_server(
            registry, *parse_address(args.metrics_address), refresh=refresh
        )
    try:
        if getattr(args, "dra", False):
            dra = dra_node(args, inventory)
            await asyncio.gather(agent.run(stop), dra.run(stop))
        else:
            await agent.run(stop)
    finally:
        if runner is not None:
            await runner.cleanup()


def run(args: argparse.Namespace) -> int:
    problem = _check(args)
    if problem is not None:
        print(f"gpupool agent: error: {problem}", file=sys.stderr)
        return 2
    configure_logging(args.log_level)

    async def main() -> None:
        stop = stop_on_signals()
        await run_agent(args, stop)

    try:
        asyncio.run(main())
    except GpupoolError as err:
        print(f"gpupool agent: error: {err}", file=sys.stderr)
        return 1
    except ImportError as err:
        print(
            f"gpupool agent: error: cannot load NVML ({err}); on a node without NVIDIA's driver "
            f"use --fake-gpus",
            file=sys.stderr,
        )
        return 1
    except Exception as err:
        if not any(c.__name__ == "NVMLError" for c in type(err).__mro__):
            raise
        print(
            f"gpupool agent: error: NVML failed: {err}; is NVIDIA's driver installed on this "
            f"node? (use --fake-gpus on nodes without GPUs)",
            file=sys.stderr,
        )
        return 1
    return 0
