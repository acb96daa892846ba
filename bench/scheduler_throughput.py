"""Pods scheduled per second by the real kube-scheduler with gpupool's extender, against
kube-scheduler alone, on the same kwok cluster in one run; prints JSON.

    .venv/bin/python bench/scheduler_throughput.py [--nodes 50] [--pods 300] [--rounds 3]
        [--extender-gc-young N]

One dev cluster (`--nodes` kwok nodes of `--gpus`), kube-scheduler configured with the extender
(gpupool's two entries: the GPU pods' filter, prioritize and bind, and `prioritize-cpu`, ignorable,
for every other pod), `gpupool extender` running as a process (`--policy`), and a second
kube-scheduler with no extender at all (its own profile name, `kube-scheduler-alone`). On the
same nodes:

- alone: pods asking for `cpu: 10m` only, naming the second scheduler — kube-scheduler alone,
  as it ships: the baseline of the target (the extender's rate at least 0.65 of it);
- plain: the same pods through gpupool's scheduler: kube-scheduler and one `prioritize-cpu`
  call to the extender per pod (how a CPU pod is scheduled where gpupool is installed);
- extender: pods asking for `cpu: 10m`, `gpupool.io/gpu-memory: 1Gi`, `gpupool.io/vgpu: 1` (what
  the webhook makes of a user's pod) — filter and prioritize over HTTP, then the extender's bind
  (a consistent re-list of the node's leases when stale, the Binding with the pod's annotations;
  the GpuLease is created after the Binding, off the bind's critical path). Each extender phase
  also reports `leases_s`, when the phase's last GpuLease stood (from the first gate removal),
  and `pods_per_s_to_leases`, the rate counted to that moment instead of the last Binding.
  /filter answers the planner's pick alone, so kube-scheduler skips its scoring phase;
- extender_scored: the extender pod with a preferred node affinity every node matches (weight 1),
  so /filter answers every node that fits and kube-scheduler scores them, calling /prioritize
  and /prioritize-cpu: how every GPU pod was scheduled before /filter answered the pick alone
  (adapters/extender_http/filter_pick.py), and how a pod with soft preferences still is.

(The *serial* kind, bind as it first was, is gone with the extender's `--serial-bind`: a
benchmark-only mode does not live in src/; its figures stay in bench/results.) Each extender
phase also reports the mean time of each bind step, from the extender's
`gpupool_extender_bind_step_seconds` histogram.

Each round, for each kind (the order alternates between rounds): `--pods` pods are created with
a scheduling gate (not timed), a watch on their namespace is established, then the gates are
removed by 32 concurrent patches. The rate is pods / (last pod seen bound − first gate removed),
the bind times taken from the watch. The gate removal time is reported too: when it is near the
scheduling time, the client, not the scheduler, set the pace. Everything — the control plane, the
extender and this client — shares the machine's cores, equally for both kinds. Each phase reports
`cpu_ms_per_pod`: the CPU time (utime + stime, /proc) each process used over the same window,
per pod; `cpu_ms_per_pod_median` sums it up per kind. When the machine is saturated, the ratio of
the rates is the inverse ratio of the per-pod totals. Each phase also reports `cycle_ms`, the
mean of kube-scheduler's own `scheduling_attempt_duration_seconds` (an attempt, its bind
included) and `scheduling_algorithm_duration_seconds` (filter, the extender's /filter round trip
included, and score) and the extender's /filter handler time, and `requests_per_pod`: what the
API server was asked over the phase by verb and resource (its `apiserver_request_total`), per pod.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import secrets
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, cast

import yaml
from api_requests import request_counts
from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event, Namespace, Pod
from lightkube.types import PatchType
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from gpupool.adapters.kubeclient import async_client
from gpupool.adapters.kubernetes.resources import GpuLease
from gpupool.cli.daemon import GC_YOUNG_THRESHOLD
from gpupool.devcluster import ClusterSpec, DevCluster, control_plane, processes, readiness
from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.binaries import Binaries, version_tag
from gpupool.devcluster.nodes import node_specs, parse_gpu_spec
from gpupool.devcluster.polling import poll_until
from gpupool.devcluster.ports import free_port
from gpupool.devcluster.readiness import insecure_context
from gpupool.devcluster.scheduler_config import ExtenderConfig, scheduler_configuration
from gpupool.domain.devices import SHARES_PER_CARD

GATE = "gpupool.io/bench-hold"
KINDS = ("alone", "plain", "extender", "extender_scored")
GPU_KINDS = ("extender", "extender_scored")
TARGET_RATIO = 0.65  # the extender's rate against kube-scheduler alone (issue 24's target)
ALONE_SCHEDULER = "kube-scheduler-alone"  # the second scheduler's profile: no extender
# a preference every node meets: kube-scheduler's scoring runs, and changes no choice
EVERY_NODE = {
    "weight": 1,
    "preference": {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "Exists"}]},
}
STEP_METRIC = "gpupool_extender_bind_step_seconds"
# kube-scheduler's own clock: one scheduling attempt (its serial cycle: queue pop, filter with the
# extender's /filter round trip, score, reserve; the bind runs apart) and the algorithm within it
SCHEDULER_METRICS = (
    "scheduler_scheduling_attempt_duration_seconds",
    "scheduler_scheduling_algorithm_duration_seconds",
)
FILTER_METRIC = "gpupool_extender_latency_seconds"  # its verb="filter" samples


def pod(ns: str, name: str, kind: str) -> dict[str, Any]:
    limits = {"cpu": "10m"}
    if kind in GPU_KINDS:
        limits |= {"gpupool.io/gpu-memory": "1Gi", "gpupool.io/vgpu": "1"}
    spec: dict[str, Any] = {
        "schedulingGates": [{"name": GATE}],
        "containers": [
            {"name": "c", "image": "registry.example/bench:1", "resources": {"limits": limits}}
        ],
    }
    if kind == "extender_scored":
        preferred = {"preferredDuringSchedulingIgnoredDuringExecution": [EVERY_NODE]}
        spec["affinity"] = {"nodeAffinity": preferred}
    if kind == "alone":
        spec["schedulerName"] = ALONE_SCHEDULER
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process (None once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_of(pids: dict[str, int]) -> dict[str, float | None]:
    return {name: cpu_seconds(pid) for name, pid in pids.items()}


async def one_phase(
    client: AsyncClient, kind: str, count: int, timeout_s: float, pids: dict[str, int]
) -> dict[str, Any]:
    ns = f"bench-{kind.replace('_', '-')}-{secrets.token_hex(3)}"
    await client.create(Namespace(metadata=ObjectMeta(name=ns)))
    names = [f"p-{i:05d}" for i in range(count)]
    limit = asyncio.Semaphore(32)

    async def create(name: str) -> None:
        async with limit:
            await client.create(cast(Pod, Pod.from_dict(pod(ns, name, kind))))

    await asyncio.gather(*(create(n) for n in names))

    seen: set[str] = set()
    bound: dict[str, float] = {}
    watching = asyncio.Event()
    done = asyncio.Event()

    async def watch() -> None:
        async for _event, obj in client.watch(Pod, namespace=ns):
            name = obj.metadata.name if obj.metadata else None
            if name is None:
                continue
            seen.add(name)
            if len(seen) >= count:
                watching.set()
            if obj.spec is not None and obj.spec.nodeName and name not in bound:
                bound[name] = time.perf_counter()
                if len(bound) >= count:
                    done.set()
                    return

    watcher = asyncio.ensure_future(watch())
    try:
        await asyncio.wait_for(watching.wait(), 60)

        async def ungate(name: str) -> None:
            async with limit:
                await client.patch(
                    Pod,
                    name,
                    [{"op": "remove", "path": "/spec/schedulingGates"}],
                    namespace=ns,
                    patch_type=PatchType.JSON,
                )

        cpu_start = cpu_of(pids)
        start = time.perf_counter()
        await asyncio.gather(*(ungate(n) for n in names))
        ungated = time.perf_counter() - start
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), timeout_s)
        cpu_end = cpu_of(pids)
        # The extender creates each pod's GpuLease just after its Binding: when did the last
        # one stand? (the rate counts Bindings; this says how far the leases trailed them)
        leases_s = None
        if kind in GPU_KINDS and len(bound) >= count:
            leases_s = await leases_standing(client, ns, count, start, timeout_s)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    # Scheduling attempts that failed on the way (e.g. a bind that outlived the extender's
    # httpTimeout), by event reason; a pod that went straight through has one `Scheduled`.
    reasons: dict[str, int] = {}
    samples: dict[str, str] = {}
    async for event in client.list(Event, namespace=ns):
        if event.reason and event.reason != "Scheduled":
            reasons[event.reason] = reasons.get(event.reason, 0) + (event.count or 1)
            samples.setdefault(event.reason, (event.message or "")[:300])
    if len(bound) < count:
        return {
            "kind": kind,
            "namespace": ns,
            "bound": len(bound),
            "of": count,
            "timed_out": True,
            "other_events": reasons,
            "event_samples": samples,
        }
    elapsed = max(bound.values()) - start
    return {
        **(
            {"leases_s": leases_s, "pods_per_s_to_leases": round(count / leases_s, 1)}
            if leases_s
            else {}
        ),
        "kind": kind,
        "namespace": ns,
        "pods": count,
        "seconds": round(elapsed, 3),
        "pods_per_s": round(count / elapsed, 1),
        "ungate_s": round(ungated, 3),
        # CPU each process used from the first gate removal to the last bind, per pod: where the
        # machine's time went (the machine is saturated when their sum per second ~ its cores).
        "cpu_ms_per_pod": {
            name: round(1000 * (end - begin) / count, 2)
            for name, begin in cpu_start.items()
            if begin is not None and (end := cpu_end.get(name)) is not None
        },
        "other_events": reasons,
        "event_samples": samples,
    }


async def leases_standing(
    client: AsyncClient, ns: str, count: int, start: float, timeout_s: float
) -> float | None:
    """Seconds from `start` until `count` GpuLeases stand in `ns` (None: not within timeout_s);
    polled every 50 ms, so late by up to that."""
    deadline = start + timeout_s
    while time.perf_counter() < deadline:
        leases = [x async for x in client.list(GpuLease, namespace=ns)]
        if len(leases) >= count:
            return round(time.perf_counter() - start, 3)
        await asyncio.sleep(0.05)
    return None


def start_extender(
    cluster: DevCluster, kubeconfig: str, port: int, policy: str, gc_young: int | None = None
) -> processes.ProcessRecord:
    # at another young-generation GC threshold than the daemons' own through bench/gc_young.py
    gpupool = ["-m", "gpupool.cli.main"]
    if gc_young is not None:
        gpupool = [str(Path(__file__).with_name("gc_young.py")), str(gc_young)]
    argv = [
        sys.executable, *gpupool, "extender",
        "--kubeconfig", kubeconfig, "--host", "127.0.0.1", "--port", str(port),
        "--policy", policy, "--apply-crds", "--log-level", "WARNING",
    ]  # fmt: skip
    record = processes.start(
        "gpupool-extender",
        argv,
        cluster.log_dir / "gpupool-extender.log",
        env={**os.environ, "NO_PROXY": "127.0.0.1,localhost"},
        die_with_parent=True,
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def healthy() -> bool:
        if not processes.is_running(record):
            raise SystemExit(f"extender exited:\n{processes.tail(record.log)}")
        try:
            with opener.open(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
                return int(resp.status) == 200
        except OSError:
            return False

    if not poll_until(healthy, timeout_s=90, interval_s=0.2):
        raise SystemExit(f"extender not ready:\n{processes.tail(record.log)}")
    return record


def start_scheduler_alone(cluster: DevCluster) -> tuple[processes.ProcessRecord, int]:
    """kube-scheduler with no extender (the dev cluster's configuration without one), under
    its own profile name so that only the `alone` kind's pods are its; returns it and its
    port once it answers /healthz."""
    config = scheduler_configuration(cluster.scheduler_kubeconfig_path)
    config["profiles"] = [{"schedulerName": ALONE_SCHEDULER}]
    path = cluster.state_dir / "scheduler-alone.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    port = free_port()
    argv = control_plane.scheduler_argv(
        Binaries.locate(cluster.bin_dir),
        {"kube-scheduler": port},
        path,
        cluster.state_dir / "scheduler-alone-certs",
    )
    record = processes.start(
        ALONE_SCHEDULER, argv, cluster.log_dir / f"{ALONE_SCHEDULER}.log", die_with_parent=True
    )
    url = f"https://127.0.0.1:{port}/healthz"  # as the dev cluster waits for its own
    readiness.wait(record, 90, lambda: readiness.http_ok(url, insecure_context()))
    return record, port


def scrape(url: str) -> list[Metric]:
    """The metric families at `url` (kube-scheduler's self-signed port: not verified)."""
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=insecure_context())
    )
    with opener.open(url, timeout=5) as resp:
        return list(text_string_to_metric_families(resp.read().decode()))


def histogram(
    families: list[Metric], name: str, *, by: str | None = None, verb: str | None = None
) -> dict[str, tuple[float, float]]:
    """(count, sum) of histogram `name`, per value of its label `by` (else one entry, `name`),
    summed over its other labels; `verb`: only its samples with that verb."""
    out: dict[str, list[float]] = {}
    for family in families:
        if family.name != name:
            continue
        for sample in family.samples:
            at = {"_count": 0, "_sum": 1}.get(sample.name.removeprefix(name))
            if at is None or (verb is not None and sample.labels.get("verb") != verb):
                continue
            key = sample.labels.get(by, "") if by else name
            out.setdefault(key, [0.0, 0.0])[at] += sample.value
    return {k: (v[0], v[1]) for k, v in out.items()}


def step_means(
    before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]
) -> dict[str, dict[str, float]]:
    out = {}
    for step, (n, total) in after.items():
        n0, t0 = before.get(step, (0.0, 0.0))
        if n > n0:
            out[step] = {"count": n - n0, "mean_ms": round(1000 * (total - t0) / (n - n0), 2)}
    return out


class Extender:
    """The extender process, started by the first phase that needs it."""

    def __init__(
        self, cluster: DevCluster, kubeconfig: str, port: int, policy: str, gc_young: int | None
    ) -> None:
        self.cluster, self.kubeconfig, self.port, self.policy = cluster, kubeconfig, port, policy
        self.gc_young = gc_young
        self.record: processes.ProcessRecord | None = None

    def ensure(self) -> None:
        if self.record is None:
            self.record = start_extender(
                self.cluster, self.kubeconfig, self.port, self.policy, self.gc_young
            )

    def stop(self) -> None:
        if self.record is not None:
            processes.stop(self.record)
            self.record = None


async def measure(
    kubeconfig: str,
    args: argparse.Namespace,
    extender: Extender,
    kinds: tuple[str, ...],
    cluster_pids: dict[str, int],
    scheduler_ports: dict[str, int],
    apiserver: KubeApi,
) -> list[dict[str, Any]]:
    client = async_client(Path(kubeconfig), field_manager="gpupool-bench", timeout_s=30)
    results = []

    async def phase(kind: str, count: int) -> dict[str, Any]:
        if kind in GPU_KINDS:
            extender.ensure()
        # the scheduler of the kind's pods: its attempt and algorithm times
        scheduler_port = scheduler_ports[ALONE_SCHEDULER if kind == "alone" else "kube-scheduler"]
        before = readings(scheduler_port, extender)
        asked = request_counts(str(apiserver.get("/metrics")))
        pids = {**cluster_pids, "bench-client": os.getpid()}
        if extender.record is not None:
            pids["gpupool-extender"] = extender.record.pid
        result = await one_phase(client, kind, count, args.timeout, pids)
        after = readings(scheduler_port, extender)
        if kind in GPU_KINDS:
            result["bind_steps"] = step_means(bind_steps(before), bind_steps(after))
        result["cycle_ms"] = step_means(cycle_sums(before), cycle_sums(after))
        # what the API server was asked over the phase (its create, ungate, list and Binding
        # included), per pod: the writes a GPU pod adds are where its extra CPU goes
        asked = request_counts(str(apiserver.get("/metrics"))) - asked
        result["requests_per_pod"] = {
            f"{verb} {resource}": round(n / count, 2)
            for (verb, resource), n in sorted(asked.items())
            if verb not in ("WATCH", "LIST") or n >= count / 10
        }
        return result

    try:
        # A warm-up of each kind (connections, caches, the extender's first plans): not counted.
        for kind in kinds:
            await phase(kind, min(20, args.pods))
        for round_ in range(args.rounds):
            order = kinds if round_ % 2 == 0 else tuple(reversed(kinds))
            for kind in order:
                result = await phase(kind, args.pods)
                result["round"] = round_
                print(json.dumps(result), file=sys.stderr, flush=True)
                results.append(result)
    finally:
        await client.close()
    return results


def readings(scheduler_port: int, extender: Extender) -> dict[str, list[Metric]]:
    """kube-scheduler's metrics and, once it runs, the extender's: each scraped once."""
    out = {"scheduler": scrape(f"https://127.0.0.1:{scheduler_port}/metrics")}
    if extender.record is not None:
        out["extender"] = scrape(f"http://127.0.0.1:{extender.port}/metrics")
    return out


def bind_steps(read: dict[str, list[Metric]]) -> dict[str, tuple[float, float]]:
    """(count, sum of seconds) per bind step, from the extender's histogram."""
    return histogram(read.get("extender", []), STEP_METRIC, by="step")


def cycle_sums(read: dict[str, list[Metric]]) -> dict[str, tuple[float, float]]:
    """kube-scheduler's attempt and algorithm histograms and, once it runs, the extender's
    /filter latency: (count, sum of seconds) each."""
    sums = {
        n: v for name in SCHEDULER_METRICS for n, v in histogram(read["scheduler"], name).items()
    }
    sums |= histogram(read.get("extender", []), FILTER_METRIC, verb="filter")
    return {name.removeprefix("scheduler_"): v for name, v in sums.items()}


def cpu_medians(results: list[dict[str, Any]], kinds: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in kinds:
        rows = [r["cpu_ms_per_pod"] for r in results if r["kind"] == kind and "cpu_ms_per_pod" in r]
        names = sorted({name for row in rows for name in row})
        per = {n: round(statistics.median([r[n] for r in rows if n in r]), 2) for n in names}
        out[kind] = per | {"total": round(sum(per.values()), 2)}
    return out


POD_READY = "  name: pod-ready\nspec:\n"


def hold_pods_pending() -> None:
    """kwok's pod-ready stage delayed an hour in the dev cluster's kwok configuration. Without
    it, each bound pod gets a status write (Running) from kwok, which the API server, etcd and
    every pod watcher then handle: a faster phase ends before kwok has caught up with its pods
    (~0.3 status writes a pod in the window for *alone*, ~0.6-1.1 for the extender's), so its
    window leaves out work a slower one pays for."""
    config = control_plane.KWOK_CONFIG
    if POD_READY not in config:
        raise SystemExit("kwok_stages.yaml has no pod-ready stage to hold off")
    delayed = POD_READY + "  delay:\n    durationMilliseconds: 3600000\n"
    control_plane.KWOK_CONFIG = config.replace(POD_READY, delayed)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--gpus", default="8xA100-80GB")
    parser.add_argument("--pods", type=int, default=300, help="pods per kind per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--policy", default="gpupool")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per phase")
    parser.add_argument(
        "--extender-timeout",
        type=float,
        default=ExtenderConfig("").http_timeout_s,
        help="kube-scheduler's httpTimeout for the extender, seconds (default: the dev cluster's)",
    )
    parser.add_argument(
        "--extender-gc-young",
        type=int,
        help="run the extender at this young-generation GC threshold (bench/gc_young.py; "
        "default: the daemons' own)",
    )
    parser.add_argument(
        "--pods-stay-pending",
        action="store_true",
        help="hold kwok's pod-ready stage off for the run (an hour's delay): no pod's status is "
        "written by the fake kubelet in any phase, so each phase's window holds scheduling alone",
    )
    args = parser.parse_args()
    if args.pods_stay_pending:
        hold_pods_pending()
    kinds = KINDS
    # pods stay bound until the cluster goes: every GPU pod of the run needs a share of a card
    gpus = parse_gpu_spec(args.gpus)
    room = args.nodes * gpus.count * SHARES_PER_CARD
    wanted = len(GPU_KINDS) * (args.rounds * args.pods + min(20, args.pods))
    if wanted > room:
        parser.error(
            f"{wanted} GPU pods over the run, but {args.nodes} nodes x {gpus.count} cards x "
            f"{SHARES_PER_CARD} shares hold {room}: add --nodes or lower --pods/--rounds"
        )

    port = free_port()
    spec = ClusterSpec(
        nodes=tuple(node_specs(args.nodes, parse_gpu_spec(args.gpus))),
        extender=ExtenderConfig(
            url_prefix=f"http://127.0.0.1:{port}/gpupool", http_timeout_s=args.extender_timeout
        ),
    )
    with tempfile.TemporaryDirectory(prefix="gpupool-sched-bench-") as tmp:
        cluster = DevCluster(Path(tmp) / "cluster")
        state = cluster.up(spec, die_with_parent=True)
        extender = Extender(cluster, state.kubeconfig, port, args.policy, args.extender_gc_young)
        alone: processes.ProcessRecord | None = None
        try:
            alone, alone_port = start_scheduler_alone(cluster)
            cluster_pids = {p.name: p.pid for p in state.processes} | {ALONE_SCHEDULER: alone.pid}
            ports = {"kube-scheduler": state.ports["kube-scheduler"], ALONE_SCHEDULER: alone_port}
            results = asyncio.run(
                measure(state.kubeconfig, args, extender, kinds, cluster_pids, ports, cluster.api())
            )
        finally:
            extender.stop()
            if alone is not None:
                processes.stop(alone)
            cluster.down()

    rates: dict[str, list[float]] = {
        kind: [r["pods_per_s"] for r in results if r["kind"] == kind and "pods_per_s" in r]
        for kind in kinds
    }
    medians = {k: round(statistics.median(v), 1) if v else None for k, v in rates.items()}

    def ratio_of(kind: str, to: str) -> float | None:
        top, bottom = medians.get(kind), medians[to]
        return round(top / bottom, 3) if top and bottom else None

    ratio = ratio_of("extender", "alone")
    print(
        json.dumps(
            {
                "benchmark": "scheduler throughput: kube-scheduler + gpupool extender vs alone",
                "binaries": version_tag(),
                "nodes": args.nodes,
                "gpus_per_node": args.gpus,
                "policy": args.policy,
                "extender_http_timeout_s": args.extender_timeout,
                "extender_gc_young": args.extender_gc_young or GC_YOUNG_THRESHOLD,
                "pods_per_phase": args.pods,
                "rounds": args.rounds,
                "pods_stay_pending": args.pods_stay_pending,
                "cpus": os.cpu_count(),
                "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
                "python": platform.python_version(),
                "pods_per_s": rates,
                "median_pods_per_s": medians,
                # the target's ratio: against kube-scheduler with no extender
                "ratio_extender_to_alone": ratio,
                "ratio_extender_scored_to_alone": ratio_of("extender_scored", "alone"),
                # against CPU pods on gpupool's scheduler (one prioritize-cpu call each)
                "ratio_extender_to_plain": ratio_of("extender", "plain"),
                "ratio_plain_to_alone": ratio_of("plain", "alone"),
                "cpu_ms_per_pod_median": cpu_medians(results, kinds),
                "target_ratio": TARGET_RATIO,
                "target_met": ratio is not None and ratio >= TARGET_RATIO,
                "phases": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
