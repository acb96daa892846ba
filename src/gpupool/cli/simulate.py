"""`gpupool simulate`: the built-in scenario, the trace `fill` experiment (and `replay`)."""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpupool.cli.replay import add_replay_parser
from gpupool.cli.simulate_autoscale import add_autoscale_parser
from gpupool.domain.errors import GpupoolError
from gpupool.placement.policy_names import POLICY_NAMES

if TYPE_CHECKING:  # rich, numpy and the simulator load when a run starts, not for --help
    from gpupool.domain.devices import Node
    from gpupool.domain.requests import Request


class InvalidArgument(GpupoolError):
    """A command-line value is malformed."""


def parse_seeds(text: str) -> list[int]:
    """`42-51`, `42,43,47` or `42`."""
    seeds: list[int] = []
    try:
        for part in text.split(","):
            start, dash, end = part.strip().partition("-")
            if dash:
                lo, hi = int(start), int(end)
                if hi < lo:
                    raise ValueError(part)
                seeds.extend(range(lo, hi + 1))
            else:
                seeds.append(int(start))
    except ValueError:
        raise InvalidArgument(f"--seeds must look like 42-51 or 42,43; got {text!r}") from None
    return list(dict.fromkeys(seeds))


def parse_policies(values: Sequence[str]) -> list[str]:
    names: list[str] = []
    for value in values:
        for name in value.split(","):
            name = name.strip()
            if name == "all":
                names.extend(POLICY_NAMES)
            elif name not in POLICY_NAMES:
                raise InvalidArgument(
                    f"unknown policy {name!r}; choose from {', '.join(POLICY_NAMES)} or all"
                )
            else:
                names.append(name)
    return list(dict.fromkeys(names))


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sim = subparsers.add_parser(
        "simulate",
        help="what would pooling do for a cluster? (no arguments: the built-in scenario)",
        description="Without a subcommand, runs the built-in mixed-pool scenario with every "
        "policy side by side and writes the table, JSON and plot to --out.",
    )
    sim.add_argument("--out", default="gpupool-out", help="folder for JSON and plot (built-in run)")
    sim.add_argument("--seeds", default="42-44", help="seeds for the built-in run (default 42-44)")
    sim.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel processes")
    sim.set_defaults(func=run_builtin)
    modes = sim.add_subparsers(dest="mode", metavar="MODE")

    fill = modes.add_parser(
        "fill",
        help="the FGD paper's fill experiment on a trace or scenario",
        description="Shuffle the tasks per seed, inflate to 130%% of GPU capacity, submit each "
        "once in order; nothing departs. Reports unallocated GPU %% at 100%%/130%% arrived load "
        "and fragmentation at 80%%.",
    )
    source = fill.add_argument_group("input (a node list and a pod list, or one scenario file)")
    source.add_argument("--nodes", type=Path, help="openb node list CSV")
    source.add_argument("--pods", type=Path, help="openb pod list CSV")
    source.add_argument("--scenario", type=Path, help="gpupool YAML scenario")
    fill.add_argument(
        "--policy",
        action="append",
        default=[],
        help="policy name, comma list, or 'all' (repeatable; default: all)",
    )
    fill.add_argument("--seeds", default="42-51", help="seeds, e.g. 42-51 (default) or 42,43")
    fill.add_argument("--json", type=Path, help="write results as JSON here")
    fill.add_argument("--plot", type=Path, help="write allocation-vs-load plot (PNG) here")
    fill.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel processes")
    fill.add_argument("--inflation", type=float, default=1.3, help="load to reach (default 1.3)")
    fill.set_defaults(func=run_fill_command)
    add_replay_parser(modes)
    add_autoscale_parser(modes)


def _inputs(args: argparse.Namespace) -> tuple[str, list[Node], list[Request]]:
    from gpupool.simulator.openb import load_nodes, load_pods
    from gpupool.simulator.scenario import load_scenario

    if args.scenario is not None:
        if args.nodes is not None or args.pods is not None:
            raise InvalidArgument("give either --scenario or --nodes with --pods, not both")
        scenario = load_scenario(args.scenario)
        return scenario.name, list(scenario.nodes), list(scenario.requests)
    if args.nodes is None or args.pods is None:
        raise InvalidArgument("fill needs --nodes NODES.csv and --pods PODS.csv (or --scenario)")
    pods = load_pods(args.pods)
    return args.pods.name, load_nodes(args.nodes), [p.request for p in pods]


def run_fill_command(args: argparse.Namespace) -> int:
    name, nodes, requests = _inputs(args)
    policies = parse_policies(args.policy or ["all"])
    seeds = parse_seeds(args.seeds)
    return _run(
        name, nodes, requests, policies, seeds, args.jobs, args.inflation, args.json, args.plot
    )


def run_builtin(args: argparse.Namespace) -> int:
    from rich.console import Console

    from gpupool.simulator.builtin import builtin_scenario
    from gpupool.simulator.builtin_timeline import builtin_tenancy, builtin_timeline
    from gpupool.simulator.replay_experiment import ReplayConfig
    from gpupool.simulator.replay_experiment import run_experiment as run_replay_experiment
    from gpupool.simulator.replay_report import plot as replay_plot
    from gpupool.simulator.replay_report import table as replay_table

    scenario = builtin_scenario()
    out = Path(args.out)
    code = _run(
        scenario.name,
        list(scenario.nodes),
        list(scenario.requests),
        list(POLICY_NAMES),
        parse_seeds(args.seeds),
        args.jobs,
        1.3,
        out / "simulate.json",
        out / "simulate.png",
        announce=out,
    )
    if code:
        return code
    # The same pool over one day, with four teams sharing it under quotas.
    nodes = list(scenario.nodes)
    result = run_replay_experiment(
        nodes,
        builtin_timeline(),
        builtin_tenancy(nodes),
        ReplayConfig(policy="gpupool", time_scale=1.0, cluster_fraction=1.0),
    )
    Console().print(replay_table(result))
    replay_json = out / "replay.json"
    replay_json.write_text(json.dumps(result.to_json(), indent=1) + "\n", encoding="utf-8")
    replay_plot(result, out / "replay.png")
    Console(stderr=True).print(f"wrote {replay_json} and {out / 'replay.png'}")
    return 0


def _run(
    name: str,
    nodes: list[Node],
    requests: list[Request],
    policies: list[str],
    seeds: list[int],
    jobs: int,
    inflation: float,
    json_path: Path | None,
    plot_path: Path | None,
    announce: Path | None = None,
) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from gpupool.simulator.experiment import run_experiment
    from gpupool.simulator.fill import FillConfig, task_count
    from gpupool.simulator.report import print_table, write_json, write_plot

    console = Console(stderr=True)
    if inflation <= 0:
        raise InvalidArgument(f"--inflation must be positive; got {inflation}")
    gpus = sum(n.gpu_count for n in nodes)
    console.print(
        f"[bold]{name}[/]: {len(nodes)} nodes, {gpus} GPUs, {len(requests)} tasks; "
        f"policies {', '.join(policies)}; seeds {seeds[0]}..{seeds[-1]}"
    )
    total = sum(task_count(nodes, requests, FillConfig(s, inflation)) for s in seeds)
    total *= len(policies)
    started = time.monotonic()
    with Progress(
        TextColumn("fill"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        task = progress.add_task("fill", total=total)
        results = run_experiment(
            nodes,
            requests,
            policies,
            seeds,
            jobs=max(1, jobs),
            progress=lambda n: progress.advance(task, n),
            base=FillConfig(seeds[0], inflation),
        )
    elapsed = time.monotonic() - started
    print_table(results, f"fill: {name} (mean ± sd over {len(seeds)} seeds)", Console())
    meta: dict[str, Any] = {
        "input": name,
        "nodes": len(nodes),
        "gpus": gpus,
        "tasks": len(requests),
        "seeds": seeds,
        "inflation": inflation,
        "elapsed_s": round(elapsed, 2),
    }
    if json_path is not None:
        write_json(results, json_path, meta)
    if plot_path is not None:
        write_plot(results, plot_path, f"fill: {name}")
    if announce is not None:
        console.print(f"wrote {json_path} and {plot_path} (folder {announce})")
    return 0
