"""`gpupool simulate replay`: the trace timeline with tenants, side by side in three modes.

Wiring only. The lead's `simulate` group calls `add_replay_parser(subparsers)`; the parser sets
`func=run_replay`.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from gpupool.domain.errors import GpupoolError
from gpupool.placement.policy_names import POLICY_NAMES
from gpupool.simulator.defaults import DEFAULT_INTERVAL_S, DEFAULT_TARGET_LOAD, DEFAULT_TIME_SCALE

if TYPE_CHECKING:  # the simulator loads when a replay runs, not for --help (cli/main.py)
    from gpupool.domain.devices import Node
    from gpupool.simulator.openb import TracePod
    from gpupool.simulator.replay_experiment import ReplayConfig
    from gpupool.simulator.tenancy import Tenancy

# simulator.replay.MODES, named here so that --help loads no simulator (cli/main.py)
EXPORT_MODES = ("whole-card", "pooled", "pooled-borrowing")


def add_replay_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="replay a trace over time with tenants: whole-card vs pooled vs pooled-borrowing",
        description=(
            "Replay an openb pod list over its creation/deletion times (arrivals compressed by "
            "--time-scale) with tenant quotas, side by side: whole cards per pod, pooling "
            "without borrowing, pooling with borrowing and reclaim. Without --tenants, pods go "
            "to three tenants by QoS (ls, be, other) with nominal quota in proportion to their "
            "total GPU request."
        ),
    )
    parser.add_argument("--nodes", help="openb node list CSV")
    parser.add_argument("--pods", help="openb pod list CSV")
    parser.add_argument(
        "--builtin",
        action="store_true",
        help="replay the built-in pool over one day with its four teams instead of a trace",
    )
    parser.add_argument(
        "--demo",
        action="store_true",
        help="replay the built-in demo (`gpupool demo`'s pool, tenants and timeline)",
    )
    parser.add_argument("--tenants", help="tenants YAML (default: three tenants by QoS)")
    parser.add_argument(
        "--policy", default="gpupool", choices=sorted(POLICY_NAMES), help="placement policy"
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        default=DEFAULT_TIME_SCALE,
        help=f"divide arrival times by this (default {DEFAULT_TIME_SCALE:g}); run times are kept",
    )
    parser.add_argument(
        "--cluster-fraction",
        type=float,
        default=None,
        help="keep this fraction of the nodes (default: so the peak offered load is --load)",
    )
    parser.add_argument(
        "--load",
        type=float,
        default=DEFAULT_TARGET_LOAD,
        help=f"peak offered GPU load / cluster GPUs when sizing the cluster (default "
        f"{DEFAULT_TARGET_LOAD:g})",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--defrag",
        metavar="THRESHOLD[,INTERVAL]",
        help="also run each pooled mode with defragmentation: every INTERVAL seconds of replay "
        f"time (default {DEFAULT_INTERVAL_S:g}) clear the cards whose fragmentation is above "
        "THRESHOLD percent (0-100); a moved pod restarts at its new place",
    )
    parser.add_argument(
        "--json", dest="json_out", help="write the results as JSON here ('-': stdout)"
    )
    parser.add_argument("--plot", help="write a PNG of allocation and fragmentation over time here")
    parser.add_argument(
        "--export-leases",
        metavar="FILE",
        help="write the leases of one mode's run (--export-mode) as GpuLeases, one a line, for "
        "`gpupool usage --from-file` (that mode is replayed once more)",
    )
    parser.add_argument(
        "--export-mode",
        choices=EXPORT_MODES,
        default="pooled-borrowing",
        help="the mode whose leases --export-leases writes (default: pooled-borrowing)",
    )
    parser.set_defaults(func=run_replay)


class ReplayInputError(GpupoolError):
    """The replay's inputs are missing or given twice."""


def replay_inputs(args: argparse.Namespace) -> tuple[list[Node], list[TracePod], Tenancy | None]:
    """The nodes and pods to replay (and the built-in pool's own tenants), from the arguments."""
    from gpupool.simulator.builtin import builtin_nodes
    from gpupool.simulator.builtin_timeline import builtin_tenancy, builtin_timeline
    from gpupool.simulator.demo_scenario import demo_timeline, load_demo
    from gpupool.simulator.openb import load_nodes, load_pods

    if getattr(args, "demo", False):  # `gpupool defrag` shares this without --demo
        if args.builtin or args.nodes or args.pods:
            raise ReplayInputError("give --demo alone, without --builtin, --nodes or --pods")
        demo = load_demo()
        return list(demo.nodes), demo_timeline(demo), demo.tenancy
    if args.builtin:
        if args.nodes or args.pods:
            raise ReplayInputError("give either --builtin or --nodes with --pods, not both")
        nodes = builtin_nodes()
        return nodes, builtin_timeline(), builtin_tenancy(nodes)
    if not args.nodes or not args.pods:
        raise ReplayInputError("replay needs --nodes NODES.csv and --pods PODS.csv (or --builtin)")
    return load_nodes(args.nodes), load_pods(args.pods), None


def run_replay(args: argparse.Namespace) -> int:
    from gpupool.placement import ClusterSnapshot
    from gpupool.quota.resource import Resource
    from gpupool.simulator.replay_defrag import ReplayDefrag
    from gpupool.simulator.replay_experiment import ReplayConfig, cluster_fraction, run_experiment
    from gpupool.simulator.replay_jobs import thin_nodes
    from gpupool.simulator.replay_report import plot, table
    from gpupool.simulator.tenants_yaml import load_tenancy

    try:
        nodes, pods, tenancy = replay_inputs(args)
        config = ReplayConfig(
            policy=args.policy,
            time_scale=1.0 if args.builtin or args.demo else args.time_scale,
            cluster_fraction=1.0 if args.builtin or args.demo else args.cluster_fraction,
            target_load=args.load,
            seed=args.seed,
            defrag=None if args.defrag is None else ReplayDefrag.parse(args.defrag),
        )
        if args.time_scale <= 0:
            raise GpupoolError(f"--time-scale must be positive; got {args.time_scale}")
        if args.load <= 0:
            raise GpupoolError(f"--load must be positive; got {args.load}")
        if args.tenants:
            # quotas given as a percentage are of the replayed cluster, so size it first
            probe = cluster_fraction(nodes, pods, config)
            kept = ClusterSnapshot.from_nodes(thin_nodes(nodes, probe)).total_gpu_milli()
            tenancy = load_tenancy(args.tenants, {Resource.GPU: kept})
            config = replace(config, cluster_fraction=probe)
        result = run_experiment(nodes, pods, tenancy, config)
    except (GpupoolError, ValueError) as exc:
        print(f"gpupool simulate replay: {exc}", file=sys.stderr)
        return 2
    print(table(result))
    data = result.to_json()
    if args.json_out == "-":
        print(json.dumps(data, indent=2))
    elif args.json_out:
        Path(args.json_out).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    if args.plot:
        plot(result, args.plot)
    if args.export_leases:
        export_leases(nodes, pods, result.tenancy, config, args.export_mode, args.export_leases)
    return 0


def export_leases(
    nodes: list[Node],
    pods: list[TracePod],
    tenancy: Tenancy,
    config: ReplayConfig,
    mode: str,
    path: str,
) -> None:
    """Replay `mode` once more, keeping its leases, and write them as GpuLeases (JSON lines)."""
    from gpupool.simulator.lease_export import ExportingEngine, gpulease_json
    from gpupool.simulator.replay_experiment import setup
    from gpupool.simulator.replay_jobs import make_jobs

    ready = setup(nodes, pods, tenancy, config)
    jobs, _ = make_jobs(pods, ready.tenancy, config.time_scale, whole_card=mode == "whole-card")
    engine = ExportingEngine.create(
        mode, ready.nodes, jobs, ready.tenancy, config.policy, ready.workload, config.seed,
        config.defrag if mode != "whole-card" else None,
    )  # fmt: skip
    assert isinstance(engine, ExportingEngine)
    engine.run()
    lines = "".join(json.dumps(gpulease_json(e)) + "\n" for e in engine.ended)
    Path(path).write_text(lines, encoding="utf-8")
