"""The Alibaba trace through the live system: a dev cluster from an openb node list, an openb pod
list submitted through the real API server in the trace's order; prints JSON.

    .venv/bin/python bench/live_replay.py [--nodes-file NODES.csv] [--pods-file PODS.csv]
        [--node-limit N] [--limit N] [--policy gpupool] [--unknown-model-as V100-32GB]
        [--in-flight 8] [--idle-window 60] [--settle 30] [--probes 10] [--timeout S]
        [--label TEXT] [--out bench/results/NAME.json]

Defaults: the trace at ../shared/traces/alibaba-gpu-v2023/ beside the checkout, its GPU node
list and its `default` pod list. The cluster is `gpupool dev-cluster up` with all of gpupool as
it runs by default (webhook, controller, extender behind kube-scheduler, web view, fake agents'
heartbeats) and an audit log of list/watch requests. Then, in order:

1. idle: after `--settle` seconds, `--idle-window` seconds of the idle cluster: LIST and WATCH
   requests per minute by resource (the API server's /metrics) and LIST by client (the audit
   log), each component's CPU seconds per minute and RSS (/proc);
2. probes: `--probes` times, one new pod on the idle cluster, create -> Running, then deleted:
   a 1 GiB gpupool slice, and a plain pod (CPU only: kube-scheduler alone) beside it;
3. fill: the pod list in its order (`--limit`: its first N), each row as the pod a user would
   write (bench/live_replay_core.py says how a share becomes bytes), into one tenant's namespace
   with a GpuQuota twice the cluster's cards (`--tenants N`: dealt in turn to N tenants, each
   with such a quota, so admission decides N groups). At most `--in-flight` pods are unsettled
   (neither Running nor marked Unschedulable) at a time, so the order holds up to that window.
   Nothing departs (a plain fill). Reported: pods per second, create -> Running p50/p99, the same
   CPU, RSS and request figures over the fill, and unallocated GPU % at the end beside the
   simulator's placement of the same requests in the same order with the same policy and the
   extender's target workload (`live_replay_core.fill_in_order`, `gpupool simulate fill`'s loop
   without its shuffle and inflation) on the cards as the live cluster offers them (each less
   the node's reserve; `simulated.whole_cards`: on whole cards, as `gpupool simulate` and the
   trace have them), and the simulator's figure on the trace's own shares;
4. steady: after `--settle` seconds, the idle figures again, with the fill's pods in place.

Pods never run GPU work: kwok's nodes have no kubelet; kwok marks bound pods Running.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

from api_requests import RequestWindow, install_audit
from emit import emit
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod
from live_replay_core import (
    InOrderFill,
    fill_in_order,
    latency_ms,
    pod_manifest,
    pod_request,
    smallest_card_mib,
    substitute_unknown,
    unallocated_gpu_pct,
)
from proc_usage import UsageWindow

from gpupool.adapters.kubeclient import async_client
from gpupool.adapters.wire import names
from gpupool.devcluster import ClusterSpec, DevCluster
from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.binaries import Binaries, version_tag
from gpupool.devcluster.demo import quota_objects
from gpupool.devcluster.nodes import fake_node_from_domain
from gpupool.devcluster.spec import GpupoolSpec
from gpupool.domain.devices import Node, uniform_node
from gpupool.domain.models import get_model
from gpupool.domain.requests import Request
from gpupool.domain.reserve import DEFAULT_RESERVE_PCT
from gpupool.domain.units import GiB
from gpupool.placement.default_workload import default_workload
from gpupool.placement.workload import TargetWorkload
from gpupool.quota.spec import TenantQuota
from gpupool.simulator.openb import load_nodes, load_pods

DEFAULT_TRACE = Path(__file__).resolve().parents[1].parent / "shared/traces/alibaba-gpu-v2023"
TENANT = "replay"
UNKNOWN_MODEL_AS = "V100-32GB"  # the cards of unknown memory size (G2, G3) become these
PROBES = "probes"


def say(text: str) -> None:
    print(f"[live-replay {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


class PodTracker:
    """One watch on a namespace's pods: when each was created (by us), bound, Running, or found
    unschedulable; `changed` wakes whoever waits for a pod to settle."""

    def __init__(self) -> None:
        self.created: dict[str, float] = {}
        self.ungated: dict[str, float] = {}  # first seen with no scheduling gate
        self.bound: dict[str, tuple[float, str]] = {}  # name -> (time, node)
        self.running: dict[str, float] = {}
        self.unschedulable: dict[str, str] = {}  # name -> the scheduler's message
        self.rejected: dict[str, str] = {}  # create refused (the webhook's message)
        self.changed = asyncio.Event()

    def settled(self, name: str) -> bool:
        return name in self.running or name in self.unschedulable or name in self.rejected

    def unsettled(self) -> int:
        return sum(1 for name in self.created if not self.settled(name))

    def see(self, pod: Pod) -> None:
        meta, spec, status = pod.metadata, pod.spec, pod.status
        name = meta.name if meta is not None else None
        if name is None:
            return
        now = time.perf_counter()
        if spec is not None and not spec.schedulingGates and name not in self.ungated:
            self.ungated[name] = now
        if spec is not None and spec.nodeName and name not in self.bound:
            self.bound[name] = (now, spec.nodeName)
        if status is not None:
            if status.phase == "Running" and name not in self.running:
                self.running[name] = now
                self.changed.set()
            for cond in status.conditions or []:
                if (
                    cond.type == "PodScheduled"
                    and cond.status == "False"
                    and cond.reason == "Unschedulable"
                    and name not in self.unschedulable
                ):
                    self.unschedulable[name] = (cond.message or "")[:300]
                    self.changed.set()

    async def watch(self, client: AsyncClient, namespace: str, resource_version: str) -> None:
        version = resource_version
        while True:
            try:
                async for _kind, pod in client.watch(
                    Pod, namespace=namespace, resource_version=version
                ):
                    self.see(pod)
                    if pod.metadata is not None and pod.metadata.resourceVersion:
                        version = pod.metadata.resourceVersion
            except asyncio.CancelledError:
                raise
            except Exception as err:  # a dropped watch: resume from the last version seen
                say(f"watch on {namespace} restarted: {type(err).__name__}: {err}")
                await asyncio.sleep(0.5)


def list_version(api: KubeApi, namespace: str) -> str:
    return str(
        api.get(f"/api/v1/namespaces/{namespace}/pods?limit=1")["metadata"]["resourceVersion"]
    )


def tenant_names(count: int) -> list[str]:
    """The tenants the pods are dealt to in turn: `replay` alone, or `replay-00`, `replay-01`..."""
    if count < 1:
        raise SystemExit(f"--tenants must be 1 or more; got {count}")
    return [TENANT] if count == 1 else [f"{TENANT}-{i:02d}" for i in range(count)]


def make_tenant(api: KubeApi, name: str, nominal_bytes: int) -> None:
    namespace, gpuquota = quota_objects(TenantQuota(name=name, nominal=nominal_bytes))
    api.create("/api/v1/namespaces", namespace)
    api.create(f"/apis/{names.API_VERSION}/gpuquotas", gpuquota)


async def create_pod(client: AsyncClient, tracker: PodTracker, manifest: dict[str, Any]) -> None:
    name = str(manifest["metadata"]["name"])
    tracker.created[name] = time.perf_counter()
    try:
        await client.create(cast(Pod, Pod.from_dict(manifest)))
    except Exception as err:  # the webhook's or API server's refusal, kept as it said it
        tracker.rejected[name] = f"{type(err).__name__}: {str(err)[:300]}"
        tracker.changed.set()


async def wait_settled(tracker: PodTracker, room: int, stall_s: float) -> bool:
    """Until at most `room` pods are unsettled; False when none settled for `stall_s`."""
    while tracker.unsettled() > room:
        tracker.changed.clear()
        try:
            await asyncio.wait_for(tracker.changed.wait(), stall_s)
        except TimeoutError:
            return False
    return True


async def probes(
    kubeconfig: Path, api: KubeApi, count: int, stall_s: float
) -> dict[str, dict[str, Any] | None]:
    """One new pod at a time on the idle cluster, create -> Running, deleted before the next."""
    client = async_client(kubeconfig, field_manager="gpupool-live-replay", timeout_s=30)
    tracker = PodTracker()
    watcher = asyncio.ensure_future(tracker.watch(client, PROBES, list_version(api, PROBES)))
    out: dict[str, dict[str, Any] | None] = {}
    try:
        for kind in ("gpupool", "plain"):
            seconds: list[float] = []
            for i in range(count):
                request = Request(name=f"{kind}-{i}", cpu_milli=10, tenant=PROBES)
                if kind == "gpupool":
                    request = Request(
                        name=f"{kind}-{i}",
                        cpu_milli=10,
                        gpu_count=1,
                        gpu_memory_bytes=GiB,
                        tenant=PROBES,
                    )
                await create_pod(client, tracker, pod_manifest(request))
                if not await wait_settled(tracker, 0, stall_s):
                    say(f"probe {request.name} did not settle in {stall_s:g}s")
                    break
                if request.name in tracker.running:
                    seconds.append(tracker.running[request.name] - tracker.created[request.name])
                await client.delete(Pod, request.name, namespace=PROBES, grace_period=0)
            out[kind] = latency_ms(seconds)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        await client.close()
    return out


async def fill(
    kubeconfig: Path,
    api: KubeApi,
    requests: Sequence[Request],
    in_flight: int,
    stall_s: float,
    pause: tuple[int, Callable[[], dict[str, Any]]] | None = None,
    budget_s: float = 0.0,
    tenants: Sequence[str] = (TENANT,),
) -> tuple[PodTracker, dict[str, Any] | None]:
    """Each request's pod in order, at most `in_flight` unsettled; until all settle or stall.
    `pause` (N, measure): once N GPU pods are bound, let every pod settle and run `measure`
    (in a thread, the watch goes on), then go on; its result is returned beside the tracker.
    `budget_s` (0: none): no pod is created after that many seconds of filling (pause aside).
    `tenants`: the namespaces the requests are in (one watch each)."""
    client = async_client(kubeconfig, field_manager="gpupool-live-replay", timeout_s=30)
    tracker = PodTracker()
    watchers = [
        asyncio.ensure_future(tracker.watch(client, t, list_version(api, t))) for t in tenants
    ]
    last_report = time.monotonic()
    gpu = {r.name for r in requests if r.wants_gpu}
    paused: dict[str, Any] | None = None
    deadline = time.monotonic() + budget_s if budget_s else None
    try:
        for n, request in enumerate(requests, start=1):
            if deadline is not None and time.monotonic() > deadline:
                say(f"fill budget of {budget_s:g}s spent: {n - 1} of {len(requests)} created")
                break
            if not await wait_settled(tracker, in_flight - 1, stall_s):
                say(f"stalled at pod {n}: none settled in {stall_s:g}s")
                break
            bound_gpu = sum(1 for name in tracker.bound if name in gpu)
            if pause is not None and paused is None and bound_gpu >= pause[0]:
                await wait_settled(tracker, 0, stall_s)
                bound = sum(1 for name in tracker.bound if name in gpu)
                say(f"paused at {bound} GPU pods bound")
                began = time.perf_counter()
                paused = {"gpu_pods_bound": bound, **await asyncio.to_thread(pause[1])}
                paused["pause_s"] = round(time.perf_counter() - began, 1)
                if deadline is not None:
                    deadline += paused["pause_s"]
            await create_pod(client, tracker, pod_manifest(request))
            if time.monotonic() - last_report > 30:
                last_report = time.monotonic()
                say(
                    f"{n}/{len(requests)} created, {len(tracker.running)} Running, "
                    f"{len(tracker.unschedulable)} unschedulable, {len(tracker.rejected)} refused"
                )
        await wait_settled(tracker, 0, stall_s)
    finally:
        for watcher in watchers:
            watcher.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        await client.close()
    return tracker, paused


def fill_figures(
    tracker: PodTracker,
    requests: Sequence[Request],
    nodes: Sequence[Node],
    simulated: dict[str, str],
    paused_s: float,
) -> dict[str, Any]:
    """`paused_s`: the mid-fill pause, left out of the fill's duration."""
    by_name = {r.name: r for r in requests}
    placed = [by_name[n] for n in tracker.bound if n in by_name]
    start = min(tracker.created.values()) if tracker.created else 0.0
    span = (max(tracker.running.values()) - start - paused_s) if tracker.running else 0.0
    latencies = [t - tracker.created[n] for n, t in tracker.running.items() if n in tracker.created]
    live_nodes = {n: node for n, (_, node) in tracker.bound.items()}
    both = [n for n in live_nodes if n in simulated]
    return {
        "pods": len(requests),
        "created": len(tracker.created),
        "placed": len(placed),
        "gpu_pods_placed": sum(1 for r in placed if r.wants_gpu),
        "running": len(tracker.running),
        "unschedulable_at_end": sum(1 for n in tracker.unschedulable if n not in live_nodes),
        "refused_at_create": len(tracker.rejected),
        "refusal_samples": dict(list(tracker.rejected.items())[:3]),
        "unschedulable_samples": dict(list(tracker.unschedulable.items())[:3]),
        "seconds": round(span, 1),
        "pods_per_s": round(len(tracker.running) / span, 2) if span else None,
        "create_to_running": latency_ms(latencies),
        "unallocated_gpu_pct": round(unallocated_gpu_pct(nodes, placed), 3),
        "placed_live_not_simulated": sum(1 for n in live_nodes if n not in simulated),
        "placed_simulated_not_live": sum(1 for n in simulated if n not in live_nodes),
        "same_node_as_simulated": sum(1 for n in both if live_nodes[n] == simulated[n]),
    }


def write_placements(path: Path, tracker: PodTracker) -> None:
    """Every pod the live fill bound, in the order its binding was seen: one JSON line each
    (`pod`, `node`, `at`: seconds from the first create), for `fill_divergence.py`."""
    start = min(tracker.created.values()) if tracker.created else 0.0
    rows = sorted(tracker.bound.items(), key=lambda item: item[1][0])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(
            json.dumps({"pod": name, "node": node, "at": round(at - start, 3)}) + "\n"
            for name, (at, node) in rows
        )
    )


ADMIN = "gpupool-admin"  # the admin kubeconfig's user: this bench, not a component


def with_component_lists(requests: dict[str, Any]) -> dict[str, Any]:
    """The window's figures plus LIST requests a minute of gpupool's components together."""
    totals = requests.get("list_per_minute_by_client_total", {})
    gpupool = {u: v for u, v in totals.items() if u.startswith("gpupool-") and u != ADMIN}
    return {**requests, "list_per_minute_gpupool_components": round(sum(gpupool.values()), 1)}


def idle_window(
    api: KubeApi, audit_log: Path, pids: dict[str, int], window_s: float
) -> dict[str, Any]:
    requests = RequestWindow(api, audit_log)
    usage = UsageWindow(pids)
    say(f"measuring {window_s:g}s of the idle cluster")
    time.sleep(window_s)
    return {"requests": with_component_lists(requests.finish()), "usage": usage.finish()}


def add_trace_arguments(parser: argparse.ArgumentParser) -> None:
    """`--nodes-file` and `--pods-file`, the trace's GPU node list and `default` pod list by
    default (the models that replay the live fill take the same)."""
    parser.add_argument(
        "--nodes-file", type=Path, default=DEFAULT_TRACE / "openb_node_list_gpu_node.csv"
    )
    parser.add_argument(
        "--pods-file", type=Path, default=DEFAULT_TRACE / "openb_pod_list_default.csv"
    )


def replay_inputs(nodes_file: Path, pods_file: Path) -> tuple[list[Node], list[Request]]:
    """The whole node list as the live replay's cluster has it (unknown cards given the default
    stand-in) and the whole pod list as the pods it submits ask, in order: what the models of
    the live fill (fill_gap_model.py, fill_divergence.py) place."""
    args = argparse.Namespace(
        nodes_file=nodes_file, node_limit=0, repeat_nodes=1, unknown_model_as=UNKNOWN_MODEL_AS
    )
    _, nodes = cluster_nodes(args)
    card = smallest_card_mib(nodes)
    return nodes, [pod_request(p.request, TENANT, card) for p in load_pods(pods_file)]


def cluster_nodes(args: argparse.Namespace) -> tuple[list[Node], list[Node]]:
    """(the trace's nodes, the nodes the cluster gets: unknown card sizes given a stand-in)."""
    trace = load_nodes(args.nodes_file)
    if args.node_limit:
        trace = trace[: args.node_limit]
    if args.repeat_nodes > 1:  # a synthetic larger cluster: the list again, names suffixed
        trace = [
            uniform_node(
                f"{n.name}-r{k}" if k else n.name,
                cpu_milli=n.cpu_milli,
                memory_mib=n.memory_mib,
                gpu_count=len(n.gpus),
                model=n.gpus[0].model if n.gpus else "T4",
            )
            for k in range(args.repeat_nodes)
            for n in trace
        ]
    live = (
        trace
        if args.unknown_model_as == "none"
        else substitute_unknown(trace, args.unknown_model_as)
    )
    return trace, live


def simulated_figures(sim: InOrderFill) -> dict[str, Any]:
    return {
        "pods": len(sim.placed) + len(sim.failed),
        "placed": len(sim.placed),
        "failed": len(sim.failed),
        "unallocated_gpu_pct": round(sim.unallocated_gpu_pct, 3),
        "unallocated_on_cards_pct": round(sim.unallocated_on_cards_pct, 3),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    trace_nodes, nodes = cluster_nodes(args)
    tasks = [p.request for p in load_pods(args.pods_file)]
    if args.limit:
        tasks = tasks[: args.limit]
    card_mib = smallest_card_mib(nodes)
    tenants = tenant_names(args.tenants)
    requests = [pod_request(t, tenants[i % len(tenants)], card_mib) for i, t in enumerate(tasks)]
    say(f"simulating {len(requests)} pods on {len(nodes)} nodes in order ({args.policy})")
    # the live cluster's cards: their memory less the node reserve its agents report
    sim = fill_in_order(nodes, requests, args.policy, default_workload(), DEFAULT_RESERVE_PCT)
    whole = fill_in_order(nodes, requests, args.policy, default_workload())
    native = fill_in_order(trace_nodes, tasks, args.policy, TargetWorkload.from_requests(tasks))
    card_bytes = sum(get_model(gpu.model).memory_bytes or 0 for node in nodes for gpu in node.gpus)
    result: dict[str, Any] = {
        "benchmark": "live trace replay (plain fill, trace order)",
        "label": args.label,
        "binaries": version_tag(),
        "nodes_file": args.nodes_file.name,
        "pods_file": args.pods_file.name,
        "nodes": len(nodes),
        "gpus": sum(len(n.gpus) for n in nodes),
        "synthetic_repeat": args.repeat_nodes,
        "pods": len(requests),
        "policy": args.policy,
        "unknown_model_as": args.unknown_model_as,
        "share_card_mib": card_mib,
        "in_flight": args.in_flight,
        "tenants": len(tenants),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
        "simulated": {
            **simulated_figures(sim),
            "reserve_pct": DEFAULT_RESERVE_PCT,
            "whole_cards": simulated_figures(whole),
            "trace_shares_unallocated_gpu_pct": round(native.unallocated_gpu_pct, 3),
            "trace_shares_placed": len(native.placed),
        },
    }
    spec = ClusterSpec(
        nodes=tuple(fake_node_from_domain(n) for n in nodes),
        gpupool=GpupoolSpec(policy=args.policy),
        **({} if args.timeout is None else {"ready_timeout_s": args.timeout}),
    )
    with tempfile.TemporaryDirectory(prefix="gpupool-live-replay-") as tmp:
        audit_log = install_audit(Path(tmp))
        cluster = DevCluster(Path(tmp) / "cluster")
        say(f"up with {len(nodes)} nodes")
        started = time.perf_counter()
        try:
            state = cluster.up(spec, die_with_parent=True)
        except Exception as err:  # reported in the JSON, as the CLI would say it
            result["error"] = f"{type(err).__name__}: {str(err).splitlines()[0]}"
            result["up_failed_after_s"] = round(time.perf_counter() - started, 1)
            result["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
            return result
        result["up_s"] = round(time.perf_counter() - started, 1)
        say(f"up in {result['up_s']}s")
        try:
            api = cluster.api()
            kubeconfig = Path(state.kubeconfig)
            pids = {p.name: p.pid for p in state.processes} | {"bench": os.getpid()}
            for tenant in tenants:  # each may take twice the cluster: quota never binds
                make_tenant(api, tenant, 2 * card_bytes)
            make_tenant(api, PROBES, 2 * card_bytes)
            say(f"settling {args.settle:g}s")
            time.sleep(args.settle)
            result["idle"] = idle_window(api, audit_log, pids, args.idle_window)
            if args.probes:
                say(f"probes: {args.probes} pods of each kind, one at a time")
                result["probes"] = asyncio.run(probes(kubeconfig, api, args.probes, args.stall))
            say(f"fill: {len(requests)} pods, at most {args.in_flight} unsettled")
            requests_window = RequestWindow(api, audit_log)
            usage = UsageWindow(pids)
            pause = None
            if args.pause_at:

                def measure() -> dict[str, Any]:  # the fill's windows leave the pause out
                    requests_window.suspend()
                    usage.suspend()
                    time.sleep(args.settle)
                    try:
                        return idle_window(api, audit_log, pids, args.idle_window)
                    finally:
                        requests_window.resume()
                        usage.resume()

                pause = (args.pause_at, measure)
            tracker, paused = asyncio.run(
                fill(
                    kubeconfig,
                    api,
                    requests,
                    args.in_flight,
                    args.stall,
                    pause,
                    args.fill_budget,
                    tenants,
                )
            )
            fill_requests = with_component_lists(requests_window.finish())
            fill_usage = usage.finish()
            if paused is not None:
                result["paused"] = paused
            if len(tracker.created) < len(requests):  # the simulator on what was submitted
                say(f"simulating the {len(tracker.created)} pods submitted")
                sim = fill_in_order(
                    nodes,
                    requests[: len(tracker.created)],
                    args.policy,
                    default_workload(),
                    DEFAULT_RESERVE_PCT,
                )
                result["simulated_submitted"] = simulated_figures(sim)
            result["fill"] = {
                **fill_figures(
                    tracker,
                    requests,
                    nodes,
                    dict(sim.placed),
                    paused["pause_s"] if paused is not None else 0.0,
                ),
                "requests": fill_requests,
                "usage": fill_usage,
            }
            result["fill"]["unallocated_gpu_pct_minus_simulated"] = round(
                result["fill"]["unallocated_gpu_pct"] - sim.unallocated_gpu_pct, 3
            )
            if args.placements is not None:
                write_placements(args.placements, tracker)
            say(f"settling {args.settle:g}s")
            time.sleep(args.settle)
            result["steady"] = idle_window(api, audit_log, pids, args.idle_window)
        except Exception as err:  # keep what was measured: the JSON says where it stopped
            result["error"] = f"{type(err).__name__}: {err}"
            say(f"stopped: {result['error']}")
        finally:
            say("down")
            cluster.down()
    result["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return result


def main(argv: list[str] | None = None, out: Callable[[str], None] = print) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_trace_arguments(parser)
    parser.add_argument("--node-limit", type=int, default=0, help="the first N nodes only")
    parser.add_argument("--repeat-nodes", type=int, default=1, help="the node list K times")
    parser.add_argument("--limit", type=int, default=0, help="the first N pods only")
    parser.add_argument("--policy", default="gpupool")
    parser.add_argument(
        "--unknown-model-as",
        default=UNKNOWN_MODEL_AS,
        help="the stand-in for cards of unknown memory (G2, G3); 'none' keeps them",
    )
    parser.add_argument("--in-flight", type=int, default=8, help="unsettled pods at most")
    parser.add_argument(
        "--tenants",
        type=int,
        default=1,
        help="deal the pods in turn to this many tenants, each its namespace and a GpuQuota of "
        "twice the cluster (admission decides per tenant: one group each)",
    )
    parser.add_argument("--idle-window", type=float, default=60.0, metavar="SECONDS")
    parser.add_argument("--settle", type=float, default=30.0, metavar="SECONDS")
    parser.add_argument("--probes", type=int, default=10, help="one-pod probes of each kind")
    parser.add_argument(
        "--pause-at",
        type=int,
        default=1000,
        help="once N GPU pods are bound, measure the idle cluster mid-fill (0: no pause)",
    )
    parser.add_argument(
        "--fill-budget",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="create no pod after this long (0: the whole list); the simulator then runs on "
        "the pods submitted",
    )
    parser.add_argument("--stall", type=float, default=120.0, help="seconds without progress")
    parser.add_argument("--timeout", type=float, default=None, help="the cluster's ready_timeout_s")
    parser.add_argument("--label", default="", help="a note kept in the JSON (e.g. before/after)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    parser.add_argument(
        "--placements",
        type=Path,
        default=None,
        help="write each bound pod's node, in binding order, here (JSON lines, for "
        "fill_divergence.py; the trace's pod names: keep it out of the repository)",
    )
    args = parser.parse_args(argv)
    if args.in_flight < 1:
        parser.error("--in-flight must be at least 1")
    Binaries.locate()  # fail early, with the build command, if anything is missing
    result = run(args)
    emit(result, args.out, indent=2, say=out)
    if "error" in result:
        sys.exit(1)


if __name__ == "__main__":
    main()
