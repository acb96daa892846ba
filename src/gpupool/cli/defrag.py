"""`gpupool defrag plan`: a dry run of the defragmentation planner over a simulator state.

The state is a replay (the built-in pool's day, or a trace) stopped at `--at` seconds of replay
time; the plan lists the moves, the cards they clear, the cards left over the threshold with the
reason, and the pool's fragmentation before and after. Nothing is moved. (The dry run on a live
cluster comes with the controller's defragmentation loop.)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gpupool.cli.replay import replay_inputs
from gpupool.domain.errors import GpupoolError
from gpupool.domain.units import format_bytes
from gpupool.placement.defrag import DefragPlan, DefragRules
from gpupool.placement.policies import POLICIES
from gpupool.simulator.replay import MODES
from gpupool.simulator.replay_experiment import (
    DEFAULT_TARGET_LOAD,
    DEFAULT_TIME_SCALE,
    ReplayConfig,
    state_at,
)


class InvalidReplayTime(GpupoolError):
    """`--at` is not a time of the replay."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    defrag = subparsers.add_parser(
        "defrag", help="defragmentation: which slices to move so fragmented cards clear"
    )
    actions = defrag.add_subparsers(dest="action", metavar="ACTION")
    plan = actions.add_parser(
        "plan",
        help="dry run: the moves over a simulator state, and fragmentation before and after",
        description="Replay the built-in pool (--builtin) or a trace (--nodes, --pods) up to "
        "--at seconds of replay time, then plan one defragmentation round over that state and "
        "print it. Nothing is moved.",
    )
    plan.add_argument(
        "--threshold",
        type=float,
        required=True,
        help="clear cards whose fragmentation is above this percentage of their memory (0-100)",
    )
    plan.add_argument("--max-moves", type=int, help="at most this many moves (default: no bound)")
    plan.add_argument("--builtin", action="store_true", help="the built-in pool over one day")
    plan.add_argument("--nodes", help="openb node list CSV")
    plan.add_argument("--pods", help="openb pod list CSV")
    plan.add_argument(
        "--at",
        type=float,
        help="replay time in seconds at which to plan (default: the last arrival)",
    )
    plan.add_argument("--mode", default="pooled", choices=MODES[1:], help="replay mode")
    plan.add_argument("--policy", default="gpupool", choices=sorted(POLICIES))
    plan.add_argument("--time-scale", type=float, default=DEFAULT_TIME_SCALE)
    plan.add_argument("--cluster-fraction", type=float, default=None)
    plan.add_argument("--load", type=float, default=DEFAULT_TARGET_LOAD)
    plan.add_argument("--json", dest="json_out", help="write the plan as JSON here ('-': stdout)")
    plan.set_defaults(func=run_plan)
    defrag.set_defaults(func=lambda _args: _usage(defrag))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def run_plan(args: argparse.Namespace) -> int:
    try:
        rules = DefragRules(threshold_pct=args.threshold, max_moves=args.max_moves)
        if args.at is not None and not args.at >= 0:
            raise InvalidReplayTime(f"--at is a replay time in seconds, 0 or more; got {args.at:g}")
        nodes, pods, tenancy = replay_inputs(args)
        config = ReplayConfig(
            policy=args.policy,
            time_scale=1.0 if args.builtin else args.time_scale,
            cluster_fraction=1.0 if args.builtin else args.cluster_fraction,
            target_load=args.load,
        )
        engine = state_at(nodes, pods, tenancy, config, args.mode, args.at)
        plan = engine.plan_defrag(rules)
    except (GpupoolError, ValueError) as exc:
        print(f"gpupool defrag plan: {exc}", file=sys.stderr)
        return 2
    at = engine.now
    print(describe(plan, rules, at))
    if args.json_out:
        text = json.dumps(plan_json(plan, rules, at), indent=2)
        if args.json_out == "-":
            print(text)
        else:
            Path(args.json_out).write_text(text + "\n", encoding="utf-8")
    return 0


def describe(plan: DefragPlan, rules: DefragRules, at: float) -> str:
    """The plan in words: one line per move, then the cards left and the pool before/after."""
    lines = [
        f"defrag plan at replay time {at:g} s, threshold {rules.threshold_pct:g}%: "
        f"{len(plan.moves)} moves clear {len(plan.cleared)} cards; pool fragmentation "
        f"{100 * plan.pool_before:.1f}% -> {100 * plan.pool_after:.1f}%"
    ]
    for m in plan.moves:
        (src, s), (dst, d) = m.source_card, m.target_card
        lines.append(
            f"  move {m.resident} (priority {m.priority}, {format_bytes(m.target.mem_bytes[0])}) "
            f"{src}/{s} ({100 * plan.card_before[(src, s)]:.0f}% -> "
            f"{100 * plan.card_after[(src, s)]:.0f}%) to {dst}/{d} "
            f"({100 * plan.card_before[(dst, d)]:.0f}% -> {100 * plan.card_after[(dst, d)]:.0f}%)"
        )
    for skip in plan.skipped:
        who = f" ({skip.resident})" if skip.resident else ""
        lines.append(
            f"  keep {skip.node}/{skip.card} at {100 * skip.fragmentation:.0f}%: "
            f"{skip.reason.value}{who}"
        )
    return "\n".join(lines)


def plan_json(plan: DefragPlan, rules: DefragRules, at: float) -> dict[str, object]:
    def card(name: tuple[str, int]) -> dict[str, object]:
        return {
            "node": name[0],
            "card": name[1],
            "fragmentation_pct_before": round(100 * plan.card_before[name], 3),
            "fragmentation_pct_after": round(100 * plan.card_after[name], 3),
        }

    return {
        "at_s": round(at, 3),
        "threshold_pct": rules.threshold_pct,
        "max_moves": rules.max_moves,
        "pool_fragmentation_pct_before": round(100 * plan.pool_before, 3),
        "pool_fragmentation_pct_after": round(100 * plan.pool_after, 3),
        "moves": [
            {
                "pod": m.resident,
                "priority": m.priority,
                "bytes": m.target.mem_bytes[0],
                "from": card(m.source_card),
                "to": card(m.target_card),
            }
            for m in plan.moves
        ],
        "cleared": [{"node": n, "card": c} for n, c in plan.cleared],
        "kept": [
            {
                "node": s.node,
                "card": s.card,
                "fragmentation_pct": round(100 * s.fragmentation, 3),
                "reason": s.reason.name.lower(),
                "pod": s.resident,
            }
            for s in plan.skipped
        ],
    }
