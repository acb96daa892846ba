"""`gpupool simulate autoscale`: the autoscaler's rule replayed over a demand series (wiring
only; `simulator.autoscale` replays, `placement.autoscale` decides, as in the controller)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gpupool.placement.autoscale import COOLDOWN_S, DOWN_PCT, UP_PCT, ScalePolicy


def add_autoscale_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "autoscale",
        help="replay the autoscaler's rule over a service's demand (default: two built-in days)",
        description="Steps the controller's autoscaling rule every --interval over a demand "
        "series (replicas' worth of GPU work over time) and prints replica-hours, unserved "
        "demand and steps, beside a deployment fixed at --max-replicas (docs/autoscaling.md).",
    )
    parser.add_argument("--demand", type=Path, help="CSV t_s,demand (default: built-in days)")
    parser.add_argument("--replicas", type=int, default=2, help="replicas at the start (2)")
    parser.add_argument("--min-replicas", type=int, default=1, help="default 1")
    parser.add_argument("--max-replicas", type=int, default=12, help="default 12")
    parser.add_argument("--up-percent", type=float, default=UP_PCT, help=f"default {UP_PCT:g}")
    parser.add_argument(
        "--down-percent", type=float, default=DOWN_PCT, help=f"default {DOWN_PCT:g}"
    )
    parser.add_argument(
        "--cooldown", type=float, default=COOLDOWN_S, metavar="SECONDS", help="default 300"
    )
    parser.add_argument(
        "--interval", type=float, default=15.0, metavar="SECONDS", help="decide every (15)"
    )
    parser.add_argument(
        "--startup",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="a new replica serves this long after its step (default 60)",
    )
    parser.add_argument("--json", type=Path, help="write the summary and timeline here")
    parser.set_defaults(func=run_autoscale)


def run_autoscale(args: argparse.Namespace) -> int:
    from gpupool.simulator.autoscale import diurnal_demand, load_demand, replay_autoscale

    policy = ScalePolicy(
        max_replicas=args.max_replicas,
        min_replicas=args.min_replicas,
        up_pct=args.up_percent,
        down_pct=args.down_percent,
        cooldown_s=args.cooldown,
    )
    series = load_demand(str(args.demand)) if args.demand else diurnal_demand()
    result = replay_autoscale(
        policy, series, replicas=args.replicas, interval_s=args.interval, startup_s=args.startup
    )
    summary = result.summary()
    print(json.dumps(summary, indent=2))
    if args.json is not None:
        timeline = [
            {"t": p.t_s, "demand": round(p.demand, 3), "replicas": p.replicas,
             "serving": p.serving, "utilisation": round(p.utilisation_pct, 1)}
            for p in result.timeline
        ]  # fmt: skip
        args.json.write_text(json.dumps({"summary": summary, "timeline": timeline}))
    return 0
