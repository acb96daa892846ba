"""Two controllers, one after the other, on ONE dev cluster: each one's idle CPU and the one-pod
latency it gives, so that a before/after differs only by the controller's code; prints JSON.

    .venv/bin/python bench/live_replay_controllers.py --node-limit 300 --slices 250 \
        --variant before=/work/main/src@5 --variant after=src [--profile] [--idle-window 60] \
        [--probes 20] [--out bench/results/NAME.json]

The cluster is `gpupool dev-cluster up` with the first `--node-limit` nodes of the openb GPU
node list (unknown cards as V100-32GB, as live_replay.py does) and all of gpupool. Then
`--slices` 1 GiB slices are created in one tenant and left Running (the state an idle cluster
holds), and the cluster's own controller is stopped. For each `--variant NAME=SRC` in turn the
controller runs again with the same command line and `PYTHONPATH=SRC` (its code from SRC; with
`SRC@SECONDS` also `--resync SECONDS`, e.g. the 5 s the controller had before), and:

1. after `--settle` seconds, `--idle-window` seconds idle: its CPU seconds per minute and RSS;
2. `--probes` one-pod probes (a 1 GiB slice, created, Running, deleted), each with the times the
   bench's watch saw it: created -> ungated (webhook and the controller's admission) -> bound
   (kube-scheduler, extender) -> Running (kwok);
3. with `--profile`, a third window under cProfile: the top functions by cumulative and by own
   time (profiling slows the process; its CPU figure is not the one above).

Plain kube-scheduler's probe (a CPU-only pod) is measured once, beside.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import pstats
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from emit import emit
from lightkube.resources.core_v1 import Pod
from live_replay import (
    DEFAULT_TRACE,
    PROBES,
    TENANT,
    PodTracker,
    cluster_nodes,
    create_pod,
    list_version,
    make_tenant,
    say,
    wait_settled,
)
from live_replay_core import latency_ms, pod_manifest
from proc_usage import UsageWindow

from gpupool.adapters.kubeclient import async_client
from gpupool.devcluster import ClusterSpec, DevCluster
from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.binaries import Binaries, version_tag
from gpupool.devcluster.nodes import fake_node_from_domain
from gpupool.devcluster.spec import GpupoolSpec
from gpupool.domain.models import get_model
from gpupool.domain.requests import Request
from gpupool.domain.units import GiB

CONTROLLER = "gpupool-controller"


def slice_request(name: str, tenant: str) -> Request:
    return Request(name=name, cpu_milli=10, gpu_count=1, gpu_memory_bytes=GiB, tenant=tenant)


async def create_and_wait(
    kubeconfig: Path, namespace: str, version: str, requests: list[Request], in_flight: int
) -> PodTracker:
    """Create the pods, at most `in_flight` unsettled; until all settle (or 120 s stall)."""

    client = async_client(kubeconfig, field_manager="gpupool-live-replay", timeout_s=30)
    tracker = PodTracker()
    watcher = asyncio.ensure_future(tracker.watch(client, namespace, version))
    try:
        for request in requests:
            if not await wait_settled(tracker, in_flight - 1, 120.0):
                say("stalled creating the slices")
                break
            await create_pod(client, tracker, pod_manifest(request))
        await wait_settled(tracker, 0, 120.0)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        await client.close()
    return tracker


async def probe(
    kubeconfig: Path, version: str, kind: str, count: int, stall_s: float
) -> dict[str, Any]:
    """`count` one-pod probes of `kind` ('gpupool' slice or 'plain' CPU pod), one at a time."""

    client = async_client(kubeconfig, field_manager="gpupool-live-replay", timeout_s=30)
    tracker = PodTracker()
    watcher = asyncio.ensure_future(tracker.watch(client, PROBES, version))
    names: list[str] = []
    try:
        stamp = time.strftime("%H%M%S")
        for i in range(count):
            name = f"{kind}-{stamp}-{i}"
            request = (
                slice_request(name, PROBES)
                if kind == "gpupool"
                else Request(name=name, cpu_milli=10, tenant=PROBES)
            )
            await create_pod(client, tracker, pod_manifest(request))
            if not await wait_settled(tracker, 0, stall_s):
                say(f"probe {name} did not settle in {stall_s:g}s")
                break
            names.append(name)
            await client.delete(Pod, name, namespace=PROBES, grace_period=0)
            await asyncio.sleep(0.5)  # the deletion's own work out of the next probe's way
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        await client.close()
    return stages(tracker, names)


def stages(tracker: PodTracker, names: list[str]) -> dict[str, Any]:
    """Create -> Running and its stages, each as p50/p99 over the probes."""
    total, ungate, bind, run = [], [], [], []
    for name in names:
        created, running = tracker.created[name], tracker.running.get(name)
        if running is None:
            continue
        total.append(running - created)
        bound = tracker.bound.get(name, (running, ""))[0]
        ungated = tracker.ungated.get(name, created)
        ungate.append(ungated - created)
        bind.append(bound - ungated)
        run.append(running - bound)
    return {
        "create_to_running": latency_ms(total),
        "create_to_ungated": latency_ms(ungate),
        "ungated_to_bound": latency_ms(bind),
        "bound_to_running": latency_ms(run),
    }


def start_controller(
    argv: tuple[str, ...], src: Path, log: Path, profile: Path | None, log_level: str
) -> Any:
    env = dict(os.environ, PYTHONPATH=str(src.resolve()))
    cmd = [*argv, "--log-level", log_level]
    if profile is not None:  # python -m cProfile -o OUT -m gpupool.cli.main ...
        cmd = [cmd[0], "-m", "cProfile", "-o", str(profile), *cmd[1:]]
    return subprocess.Popen(cmd, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)


def stop_controller(proc: Any) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def rounds_logged(lines: list[str]) -> dict[str, Any]:
    """With --log-level DEBUG: each loop's rounds and the kinds that woke them (all windows)."""
    rounds: dict[str, int] = {}
    kinds: dict[str, int] = {}
    for line in lines:
        if " round " not in line or "watched changes" not in line:
            continue
        name = line.split(" round ", 1)[1].split(":", 1)[0]
        rounds[name] = rounds.get(name, 0) + 1
        inside = line.split("(", 1)[1].split(")", 1)[0] if "(" in line else ""
        for key in filter(None, inside.split(", ")):
            kind = f"{name}<-{key.split('/', 1)[0]}"
            kinds[kind] = kinds.get(kind, 0) + 1
    return {"rounds": rounds, "woken_by_kind": kinds}


def top_functions(path: Path, key: str, count: int = 25) -> list[str]:
    stats = pstats.Stats(str(path))
    stats.sort_stats(key)
    out = []
    for func in stats.fcn_list[:count]:  # type: ignore[attr-defined]
        _cc, nc, tt, ct, _ = stats.stats[func]  # type: ignore[attr-defined]
        file, line, name = func
        where = f"{Path(file).parent.name}/{Path(file).name}:{line}" if line else file
        out.append(f"{ct:8.2f} cum {tt:8.2f} own {nc:8d} calls  {name}  {where}")
    return out


def variant_figures(
    args: argparse.Namespace,
    api: KubeApi,
    argv: tuple[str, ...],
    src: Path,
    kubeconfig: Path,
    tmp: Path,
    name: str,
    others: dict[str, int],
) -> dict[str, Any]:
    log = Path(tmp) / f"controller-{name}.log"
    say(f"{name}: controller from {src}")
    proc = start_controller(argv, src, log, None, args.log_level)
    out: dict[str, Any] = {"src": str(src)}
    try:
        time.sleep(args.settle)
        usage = UsageWindow({CONTROLLER: proc.pid, **others})
        say(f"{name}: {args.idle_window:g}s idle")
        time.sleep(args.idle_window)
        out["idle"] = usage.finish()
        out["load_avg_after_idle"] = [round(x, 2) for x in os.getloadavg()]
        if args.probes:
            say(f"{name}: {args.probes} probes")
            version = list_version(api, PROBES)
            out["probes"] = asyncio.run(
                probe(kubeconfig, version, "gpupool", args.probes, args.stall)
            )
    finally:
        stop_controller(proc)
    if args.profile:
        prof = Path(tmp) / f"controller-{name}.prof"
        proc = start_controller(argv, src, log, prof, args.log_level)
        try:
            time.sleep(args.settle + args.idle_window)
        finally:
            stop_controller(proc)
        if prof.exists():
            out["profile_idle"] = {
                "window_s": args.idle_window,
                "by_cumulative": top_functions(prof, "cumulative"),
                "by_own_time": top_functions(prof, "tottime"),
            }
    lines = log.read_text(errors="replace").splitlines()
    out["log_tail"] = lines[-15:]
    out["rounds_logged"] = rounds_logged(lines)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    _, nodes = cluster_nodes(args)
    card_bytes = sum(get_model(gpu.model).memory_bytes or 0 for node in nodes for gpu in node.gpus)
    result: dict[str, Any] = {
        "benchmark": "one cluster, controllers in turn: idle CPU and one-pod latency",
        "label": args.label,
        "binaries": version_tag(),
        "nodes": len(nodes),
        "gpus": sum(len(n.gpus) for n in nodes),
        "slices_running": args.slices,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
        "variants": {},
    }
    spec = ClusterSpec(
        nodes=tuple(fake_node_from_domain(n) for n in nodes),
        gpupool=GpupoolSpec(policy="gpupool"),
        **({} if args.timeout is None else {"ready_timeout_s": args.timeout}),
    )
    with tempfile.TemporaryDirectory(prefix="gpupool-ctrl-ab-") as tmp:
        cluster = DevCluster(Path(tmp) / "cluster")
        say(f"up with {len(nodes)} nodes")
        started = time.perf_counter()
        state = cluster.up(spec, die_with_parent=True)
        result["up_s"] = round(time.perf_counter() - started, 1)
        try:
            api = cluster.api()
            kubeconfig = Path(state.kubeconfig)
            make_tenant(api, TENANT, 2 * card_bytes)
            make_tenant(api, PROBES, 2 * card_bytes)
            say(f"{args.slices} slices")
            slices = [slice_request(f"slice-{i}", TENANT) for i in range(args.slices)]
            tracker = asyncio.run(
                create_and_wait(kubeconfig, TENANT, list_version(api, TENANT), slices, 16)
            )
            result["slices_running_seen"] = len(tracker.running)
            others = {p.name: p.pid for p in state.processes if p.name != CONTROLLER}
            record = next(p for p in state.processes if p.name == CONTROLLER)
            os.kill(record.pid, signal.SIGTERM)  # the cluster's own; ours run in its place
            time.sleep(2)
            say("plain probes")
            result["plain_probes"] = asyncio.run(
                probe(kubeconfig, list_version(api, PROBES), "plain", args.probes, args.stall)
            )
            for variant in args.variant:
                name, src = variant.split("=", 1)
                argv = record.argv
                if "@" in src:  # SRC@RESYNC: that variant's --resync (the before's 5 s)
                    src, resync = src.rsplit("@", 1)
                    argv = (*argv, "--resync", resync)
                result["variants"][name] = variant_figures(
                    args, api, argv, Path(src), kubeconfig, Path(tmp), name, others
                )
        except Exception as err:
            result["error"] = f"{type(err).__name__}: {err}"
            say(f"stopped: {result['error']}")
        finally:
            say("down")
            cluster.down()
    result["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--nodes-file", type=Path, default=DEFAULT_TRACE / "openb_node_list_gpu_node.csv"
    )
    parser.add_argument("--node-limit", type=int, default=300)
    parser.add_argument("--slices", type=int, default=250, help="1 GiB slices left Running")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=SRC")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--idle-window", type=float, default=60.0)
    parser.add_argument("--settle", type=float, default=20.0)
    parser.add_argument("--probes", type=int, default=20)
    parser.add_argument("--stall", type=float, default=60.0)
    parser.add_argument("--timeout", type=float, default=None)
    parser.add_argument("--log-level", default="INFO", help="the controllers' (DEBUG: rounds)")
    parser.add_argument("--label", default="")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    args.repeat_nodes, args.unknown_model_as = 1, "V100-32GB"
    if not args.variant:
        parser.error("name at least one --variant NAME=SRC")
    Binaries.locate()
    result = run(args)
    emit(result, args.out, indent=2)


if __name__ == "__main__":
    main()
