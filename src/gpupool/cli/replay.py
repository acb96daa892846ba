"""`gpupool simulate replay`: the trace timeline with tenants, side by side in three modes.

Wiring only. The lead's `simulate` group calls `add_replay_parser(subparsers)`; the parser sets
`func=run_replay`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gpupool.domain.errors import GpupoolError
from gpupool.placement import ClusterSnapshot
from gpupool.placement.policies import POLICIES
from gpupool.quota.resource import Resource
from gpupool.simulator.openb import load_nodes, load_pods
from gpupool.simulator.replay_experiment import (
    DEFAULT_TARGET_LOAD,
    DEFAULT_TIME_SCALE,
    ReplayConfig,
    cluster_fraction,
    run_experiment,
)
from gpupool.simulator.replay_jobs import thin_nodes
from gpupool.simulator.replay_report import plot, table
from gpupool.simulator.tenants_yaml import load_tenancy


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
    parser.add_argument("--nodes", required=True, help="openb node list CSV")
    parser.add_argument("--pods", required=True, help="openb pod list CSV")
    parser.add_argument("--tenants", help="tenants YAML (default: three tenants by QoS)")
    parser.add_argument(
        "--policy", default="gpupool", choices=sorted(POLICIES), help="placement policy"
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
        "--json", dest="json_out", help="write the results as JSON here ('-': stdout)"
    )
    parser.add_argument("--plot", help="write a PNG of allocation over time here")
    parser.set_defaults(func=run_replay)


def run_replay(args: argparse.Namespace) -> int:
    try:
        nodes = load_nodes(args.nodes)
        pods = load_pods(args.pods)
        config = ReplayConfig(
            policy=args.policy,
            time_scale=args.time_scale,
            cluster_fraction=args.cluster_fraction,
            target_load=args.load,
            seed=args.seed,
        )
        if args.time_scale <= 0:
            raise GpupoolError(f"--time-scale must be positive; got {args.time_scale}")
        if args.load <= 0:
            raise GpupoolError(f"--load must be positive; got {args.load}")
        tenancy = None
        if args.tenants:
            # quotas given as a percentage are of the replayed cluster, so size it first
            probe = cluster_fraction(nodes, pods, config)
            kept = ClusterSnapshot.from_nodes(thin_nodes(nodes, probe)).total_gpu_milli()
            tenancy = load_tenancy(args.tenants, {Resource.GPU: kept})
            config = ReplayConfig(
                policy=config.policy,
                time_scale=config.time_scale,
                cluster_fraction=probe,
                target_load=config.target_load,
                seed=config.seed,
            )
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
    return 0
