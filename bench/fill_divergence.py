"""Where a live fill's placement left the simulator's: the live placements replayed through the
simulator's own snapshot and planner, pod by pod; prints JSON.

    .venv/bin/python bench/live_replay.py --placements /tmp/placements.jsonl ...
    .venv/bin/python bench/fill_divergence.py /tmp/placements.jsonl [--nodes-file NODES.csv]
        [--pods-file PODS.csv] [--out bench/results/NAME.json]

Unallocated GPU % counts which pods were placed, not where; so the question is why the live fill
placed a different set. The placements file (`live_replay.py --placements`) lists every pod the
live fill bound, with its node, in the order its binding was seen. Replayed in that order on the
simulator's snapshot of the same nodes, their cards as the live cluster offers them (less the
node's reserve, `live_replay_core.with_reserve`):

- `choices`: for each live placement, what the planner would have chosen on the same state (the
  live placements before it): the same node, another node with the same score (a tie, which the
  live path breaks as the simulator does, so a difference here is a state that differs in what
  the planner does not score), a node the planner scores higher (and of those, how many are its
  choice once the 1 to 8 pods placed just before are taken out again: the extender chose before
  their picks counted, or their bindings were seen out of the order it chose in), or a live node
  the planner finds the pod does not fit (the live cluster's capacity differs from the model's),
  by kind of pod;
- `unplaced_live_that_fit_at_end`: the pods the live fill did not place that the planner places
  on the live fill's final state, in trace order: room the live path had and did not use (a
  kube-scheduler limit the simulator has no model of, a bind refused, a pod given up);
- `simulator_in_live_order`: the simulator's own choices over the live binding order (then the
  pods the live fill did not place, in trace order): what the order alone costs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import live_replay as lr
from emit import emit
from live_replay_core import unallocated_gpu_pct, with_reserve

from gpupool.domain.devices import Node
from gpupool.domain.errors import GpupoolError
from gpupool.domain.requests import Request
from gpupool.placement.default_workload import default_workload
from gpupool.placement.planner import Planner, first_best
from gpupool.placement.snapshot import ClusterSnapshot, Decision


def kind_of(req: Request) -> str:
    if not req.wants_gpu:
        return "cpu_only"
    return "whole_gpus" if req.whole_cards else "share"


def read_placements(path: Path) -> list[tuple[str, str]]:
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            rows.append((str(row["pod"]), str(row["node"])))
        except (ValueError, KeyError, TypeError) as err:
            raise SystemExit(f"{path}:{number}: not a placement line ({err})") from None
    return rows


def replay_live(
    nodes: list[Node], by_name: dict[str, Request], live: list[tuple[str, str]]
) -> tuple[ClusterSnapshot, list[Request], dict[str, Counter[str]], list[str]]:
    """The live placements on the simulator's snapshot, each compared with the planner's
    choice on the same state; the final state, the pods placed, the outcomes by kind, and the
    live placements the model finds do not fit."""
    snap = ClusterSnapshot(with_reserve(nodes))
    planner = Planner("gpupool", default_workload())
    outcomes: dict[str, Counter[str]] = {}
    misfits: list[str] = []
    placed: list[Request] = []
    decisions: list[Decision] = []
    for name, node in live:
        req = by_name.get(name)
        if req is None:
            continue  # a probe or a pod of another list
        tally = outcomes.setdefault(kind_of(req), Counter())
        feas, rows, scores = planner.scores(snap, req)
        i = snap.index.get(node)
        where = np.flatnonzero(rows == i) if i is not None else np.zeros(0, dtype=np.int64)
        if i is None or not len(where):
            tally["live_node_does_not_fit_in_model"] += 1
            misfits.append(f"{name} on {node}")
            continue
        best = int(rows[first_best(scores, planner.rank(snap)[rows])])
        if best == i:
            tally["same_node"] += 1
        elif scores[where[0]] >= scores.max():
            tally["tie_other_node"] += 1
        else:
            tally["planner_scores_another_higher"] += 1
            recent = chosen_without_recent(snap, planner, req, i, decisions)
            tally["... its choice without the 1-8 pods bound just before" if recent else
                  "... not its choice without them either"] += 1  # fmt: skip
        try:
            decision = planner.decide(snap, req, feas, i, 0.0)
            snap.assume(decision)
        except GpupoolError:
            tally["live_node_does_not_fit_in_model"] += 1
            misfits.append(f"{name} on {node} (cards)")
            continue
        decisions.append(decision)
        placed.append(req)
    return snap, placed, outcomes, misfits


RECENT = 8  # the live fill keeps at most 8 pods unsettled: binds out of order stay that close


def chosen_without_recent(
    snap: ClusterSnapshot, planner: Planner, req: Request, node: int, decisions: list[Decision]
) -> int | None:
    """How many of the pods placed just before (1..RECENT) must be taken out again for the
    planner to choose `node` for `req` (the extender chose before their picks counted, or their
    binds were seen out of the order it chose in); None when none does. `snap` is as given
    after."""
    taken: list[Decision] = []
    found = None
    for decision in reversed(decisions[-RECENT:]):
        snap.forget(decision)
        taken.append(decision)
        _, rows, scores = planner.scores(snap, req)
        if len(rows) and int(rows[first_best(scores, planner.rank(snap)[rows])]) == node:
            found = len(taken)
            break
    for decision in reversed(taken):
        snap.assume(decision)
    return found


def place_in_order(snap: ClusterSnapshot, requests: list[Request]) -> list[Request]:
    """Each request the planner places on `snap`, in order (assumed as it goes)."""
    planner = Planner("gpupool", default_workload())
    placed = []
    for req in requests:
        result = planner.plan(snap, req)
        if isinstance(result, Decision):
            snap.assume(result)
            placed.append(req)
    return placed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("placements", type=Path)
    lr.add_trace_arguments(parser)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    nodes, requests = lr.replay_inputs(args.nodes_file, args.pods_file)
    by_name = {r.name: r for r in requests}
    live = read_placements(args.placements)
    final, placed, outcomes, misfits = replay_live(nodes, by_name, live)
    live_names = {name for name, _ in live}
    unplaced = [r for r in requests if r.name not in live_names]
    fit_at_end = place_in_order(final, unplaced)
    live_order = [by_name[n] for n, _ in live if n in by_name] + unplaced
    in_live_order = place_in_order(ClusterSnapshot(with_reserve(nodes)), live_order)
    in_trace_order = place_in_order(ClusterSnapshot(with_reserve(nodes)), requests)
    result = {
        "benchmark": "fill divergence (live placements replayed through the simulator)",
        "placements_file": args.placements.name,
        "nodes": len(nodes),
        "pods": len(requests),
        "live_placed": len(placed),
        "live_unallocated_gpu_pct": round(unallocated_gpu_pct(nodes, placed), 3),
        "choices": {k: dict(v) for k, v in sorted(outcomes.items())},
        "live_node_does_not_fit_in_model_samples": misfits[:5],
        "unplaced_live": len(unplaced),
        "unplaced_live_that_fit_at_end": {
            "pods": len(fit_at_end),
            "by_kind": dict(Counter(kind_of(r) for r in fit_at_end)),
            "samples": [r.name for r in fit_at_end[:5]],
        },
        "simulator_in_live_order": {
            "placed": len(in_live_order),
            "unallocated_gpu_pct": round(unallocated_gpu_pct(nodes, in_live_order), 3),
        },
        "simulator_in_trace_order": {
            "placed": len(in_trace_order),
            "unallocated_gpu_pct": round(unallocated_gpu_pct(nodes, in_trace_order), 3),
        },
    }
    emit(result, args.out, indent=1)


if __name__ == "__main__":
    main()
