"""`gpupool defrag plan`: a dry run of the defragmentation planner, over a simulator state or
the live cluster.

With `--builtin` or `--nodes`/`--pods` the state is a replay stopped at `--at` seconds of replay
time. Without them it is the live cluster (the kubeconfig), read and decoded as the controller's
loop reads it (`controllers.defrag.reconcile.read_live`: the extender's snapshot of Nodes,
GpuNodes and GpuLeases, the tenant pods, the PodDisruptionBudgets), planned as its next round
would be (`controllers.defrag.plan.plan_one`), for one GpuPool's cards and settings (`--pool`)
or every card. The plan lists the moves, the cards they clear (and the waiting pod each is held
for), the cards left over the threshold with the reason, and the fragmentation before and after.
Nothing is moved.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import httpx2
from lightkube.core.exceptions import ApiError

from gpupool.adapters.cluster import KubeClusterApi
from gpupool.adapters.kubeclient import async_client
from gpupool.adapters.kubernetes.views_read import ClusterUnreachable
from gpupool.cli.replay import replay_inputs
from gpupool.controllers.defrag.plan import Round, plan_one, rules_of
from gpupool.controllers.defrag.reconcile import read_live
from gpupool.domain.errors import GpupoolError
from gpupool.domain.units import format_bytes
from gpupool.placement.defrag import DefragPlan, DefragRules
from gpupool.placement.policies import POLICIES
from gpupool.simulator.defaults import DEFAULT_TARGET_LOAD, DEFAULT_TIME_SCALE
from gpupool.simulator.replay import MODES
from gpupool.simulator.replay_experiment import ReplayConfig, state_at


class InvalidReplayTime(GpupoolError):
    """`--at` is not a time of the replay."""


class UnknownPool(GpupoolError):
    """`--pool` names no GpuPool, or one whose settings cannot be used."""


class MissingThreshold(GpupoolError):
    """No threshold: neither `--threshold` nor a GpuPool with defragmentation settings."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    defrag = subparsers.add_parser(
        "defrag", help="defragmentation: which slices to move so fragmented cards clear"
    )
    actions = defrag.add_subparsers(dest="action", metavar="ACTION")
    plan = actions.add_parser(
        "plan",
        help="dry run: the moves over a simulator state, and fragmentation before and after",
        description="Without --builtin/--nodes/--pods: plan the controller's next "
        "defragmentation round on the live cluster (the kubeconfig) for one GpuPool (--pool: its "
        "cards and settings) or every card (--threshold). With them: replay the built-in pool "
        "or a trace up to --at seconds of replay time and plan one round over that state. "
        "Nothing is moved.",
    )
    plan.add_argument(
        "--threshold",
        type=float,
        help="clear cards whose fragmentation is above this percentage of their memory (0-100); "
        "live with --pool: default the pool's spec.defragThresholdPercent",
    )
    plan.add_argument("--pool", help="live: the GpuPool whose cards and settings to plan with")
    plan.add_argument(
        "--kubeconfig", type=Path, default=None, help="live: default $KUBECONFIG, ~/.kube/config"
    )
    plan.add_argument(
        "-o", "--output", choices=("text", "json"), default="text", help="live: text or JSON"
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
    if not (args.builtin or args.nodes or args.pods):
        return run_live(args)
    try:
        if args.threshold is None:
            raise MissingThreshold("--threshold is required with a simulator state")
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


async def _live_round(args: argparse.Namespace) -> tuple[Round, DefragRules]:
    if args.threshold is None and not args.pool:
        raise MissingThreshold(
            "give --threshold, or --pool naming a GpuPool with spec.defrag.enabled"
        )
    client = async_client(args.kubeconfig, field_manager="gpupool-defrag-plan")
    api = KubeClusterApi(client, may_write=lambda: False)  # a dry run: every write refused
    try:
        now = time.time()
        gpunodes = (await api.gpu_nodes()).values
        pool = None
        if args.pool:
            pools = {p.name: p for p in (await api.gpu_pools()).values}
            pool = pools.get(args.pool)
            if pool is None:
                known = ", ".join(sorted(pools)) or "none"
                raise UnknownPool(f"no GpuPool {args.pool!r} (GpuPools: {known})")
            if pool.any_problem is not None:
                raise UnknownPool(f"GpuPool {args.pool}: {pool.any_problem}")
        if args.threshold is not None:
            rules = DefragRules(args.threshold, args.max_moves, pool is not None and bool(
                pool.defrag and pool.defrag.move_orphans))  # fmt: skip
        elif pool is not None and pool.defrag is not None:
            rules = rules_of(pool)
            if args.max_moves is not None:
                rules = DefragRules(rules.threshold_pct, args.max_moves, rules.move_orphans)
        else:
            raise MissingThreshold(
                "give --threshold, or --pool naming a GpuPool with spec.defrag.enabled"
            )
        live = await read_live(api, gpunodes, now)
        rnd = plan_one(
            pool, rules, live.placement, live.pods, live.budgets, live.held_nodes, live.closable
        )
        return rnd, rules
    except (ApiError, httpx2.HTTPError, OSError) as err:
        raise ClusterUnreachable(
            f"reading the cluster failed ({err.__class__.__name__}: {err}); check the "
            "kubeconfig's server, your credentials and that the cluster is up"
        ) from None
    finally:
        await client.close()


def run_live(args: argparse.Namespace) -> int:
    try:
        rnd, rules = asyncio.run(_live_round(args))
    except GpupoolError as exc:
        print(f"gpupool defrag plan: {exc}", file=sys.stderr)
        return 2
    where = f"GpuPool {rnd.pool}" if rnd.pool else "every card"
    if args.output == "json":
        data = plan_json(rnd.plan, rules, time.time()) | {
            "pool": rnd.pool or None,
            "held_for": _held_json(rnd.held_for),
        }
        print(json.dumps(data, indent=2))
    else:
        print(describe(rnd.plan, rules, time.time(), where=f"live, {where}"))
        for (node, card), pod in sorted(rnd.held_for.items()):
            print(f"  hold {node}/{card} for pod {pod} once fixed")
    return 0


def _held_json(held: Mapping[tuple[str, int], str]) -> list[dict[str, object]]:
    return [{"node": n, "card": c, "pod": p} for (n, c), p in sorted(held.items())]


def describe(plan: DefragPlan, rules: DefragRules, at: float, where: str = "") -> str:
    """The plan in words: one line per move, then the cards left and the pool before/after."""
    when = f"({where})" if where else f"at replay time {at:g} s"
    lines = [
        f"defrag plan {when}, threshold {rules.threshold_pct:g}%: "
        f"{len(plan.moves)} moves fix {len(plan.cleared)} cards; pool fragmentation "
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
