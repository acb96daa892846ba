"""Time `gpupool dev-cluster up` and `down` with the binaries already built; print JSON.

    .venv/bin/python bench/devcluster_up.py [--runs 5] [--nodes 4] [--gpus 8xA100-80GB] [--bare]
        [--real-node] [--cluster-file NODES.csv] [--timeout S] [--profile]
        [--list-window 60] [--out bench/results/NAME.json]

Each run: a fresh state folder, `DevCluster.up` until every component is ready and every fake
node is Ready — by default with all of gpupool, as `gpupool dev-cluster up` runs it: CRDs
Established, extender healthy, webhook registered, a GpuNode with a heartbeat per fake node;
`--bare`: the control plane and nodes only; `--real-node`: also the real node (root; kubelet
Ready, and unless --bare the agent's gpupool.io/vgpu on it) — then `down` until no process is
left (with --real-node: every container, mount, link, rule, cgroup and sysctl undone). Times are
wall-clock seconds.

`--cluster-file`: the nodes of a simulator cluster file instead of `--nodes/--gpus` (an openb node
list CSV or a YAML scenario), as `dev-cluster up --cluster-file` takes it. `--timeout`: the
cluster's `ready_timeout_s` (default: the CLI's default). `--profile`: where the time of `up`
goes — each readiness wait (component, start, seconds) and the span of the Node creates.

`--list-window S` (with gpupool): once the first run is up, wait `--settle` seconds, then count
what the API server is asked over S seconds of the idle cluster: LIST (and WATCH) requests per
resource from `apiserver_request_total` on its /metrics (read twice, subtracted), and LIST
requests per client identity and resource from an audit log (the bench adds
`--audit-policy-file` to kube-apiserver: one Metadata line per list/watch request; each gpupool
component runs as its own ServiceAccount, so the user names the component). Per minute.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from api_requests import RequestWindow, install_audit
from emit import emit

from gpupool.devcluster import ClusterSpec, DevCluster, readiness
from gpupool.devcluster import cluster as cluster_module
from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.binaries import Binaries, version_tag
from gpupool.devcluster.nodes import FakeNodeSpec, fake_node_from_domain, node_specs, parse_gpu_spec
from gpupool.devcluster.realnode.fake_gpus import DEFAULT_GPUS
from gpupool.devcluster.realnode.node import RealNodeSpec
from gpupool.devcluster.spec import GpupoolSpec
from gpupool.simulator.openb import load_nodes
from gpupool.simulator.scenario import load_scenario


def cluster_nodes(args: argparse.Namespace) -> list[FakeNodeSpec]:
    if args.cluster_file is None:
        return node_specs(args.nodes, parse_gpu_spec(args.gpus))
    path = Path(args.cluster_file)
    if path.suffix.lower() in (".yaml", ".yml"):
        domain = list(load_scenario(path).nodes)
    else:
        domain = load_nodes(path)
    return [fake_node_from_domain(node) for node in domain]


class Profile:
    """Each readiness wait and the span of the Node creates, in seconds since `up` began."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.waits: list[dict[str, Any]] = []
        self.node_creates: list[tuple[float, float]] = []
        self.created = 0

    def install(self) -> None:
        inner_wait = readiness.wait

        def wait(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return inner_wait(*args, **kwargs)
            finally:
                name = getattr(args[0], "name", "?") if args else "?"
                self.waits.append(
                    {
                        "component": name,
                        "start_s": round(start - self.t0, 2),
                        "seconds": round(time.perf_counter() - start, 2),
                    }
                )

        readiness.wait = wait
        inner_progress = getattr(readiness, "wait_progress", None)
        if inner_progress is not None:  # a count's wait (absent before it existed)

            def wait_progress(*args: Any, **kwargs: Any) -> Any:
                start = time.perf_counter()
                try:
                    return inner_progress(*args, **kwargs)
                finally:
                    name = getattr(args[0], "name", "?") if args else "?"
                    what = getattr(args[1], "what", "") if len(args) > 1 else ""
                    self.waits.append(
                        {
                            "component": name,
                            "counting": what,
                            "start_s": round(start - self.t0, 2),
                            "seconds": round(time.perf_counter() - start, 2),
                        }
                    )

            readiness.wait_progress = wait_progress
        inner_request = KubeApi.request

        def request(api: KubeApi, method: str, path: str, *a: Any, **kw: Any) -> Any:
            start = time.perf_counter()
            try:
                return inner_request(api, method, path, *a, **kw)
            finally:
                if method == "POST" and path == "/api/v1/nodes":
                    self.node_creates.append((start, time.perf_counter()))

        KubeApi.request = request  # type: ignore[method-assign,assignment]
        inner_create = getattr(cluster_module, "create_nodes", None)
        if inner_create is not None:  # the concurrent creates (absent before they existed)

            def create_nodes(api: KubeApi, nodes: Any, *a: Any, **kw: Any) -> Any:
                start = time.perf_counter()
                try:
                    return inner_create(api, nodes, *a, **kw)
                finally:
                    self.node_creates.append((start, time.perf_counter()))
                    self.created += len(nodes)

            cluster_module.create_nodes = create_nodes

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"waits": self.waits}
        if self.node_creates:
            first = min(s for s, _ in self.node_creates)
            last = max(e for _, e in self.node_creates)
            out["node_creates"] = {
                "count": self.created or len(self.node_creates),
                "start_s": round(first - self.t0, 2),
                "span_s": round(last - first, 2),
            }
        return out


def count_lists(
    api: KubeApi, audit_log: Path | None, window_s: float, say: Callable[[str], None]
) -> dict[str, Any]:
    """LIST/WATCH requests over `window_s` seconds, per minute."""
    window = RequestWindow(api, audit_log)
    say(f"counting requests for {window_s:g}s")
    time.sleep(window_s)
    return window.finish()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--gpus", default="8xA100-80GB")
    parser.add_argument("--cluster-file", default=None, help="an openb node list or a scenario")
    parser.add_argument("--bare", action="store_true", help="without gpupool's components")
    parser.add_argument("--real-node", action="store_true", help="with the real node (root)")
    parser.add_argument("--timeout", type=float, default=None, help="ready_timeout_s")
    parser.add_argument("--profile", action="store_true", help="time each wait of the first run")
    parser.add_argument("--list-window", type=float, default=0.0, metavar="SECONDS")
    parser.add_argument("--settle", type=float, default=30.0, metavar="SECONDS")
    parser.add_argument("--label", default="", help="a note kept in the JSON (e.g. before/after)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args()

    def say(text: str) -> None:
        print(f"[bench] {text}", file=sys.stderr, flush=True)

    Binaries.locate()  # fail early, with the build command, if anything is missing
    nodes = cluster_nodes(args)
    extra = {} if args.timeout is None else {"ready_timeout_s": args.timeout}
    spec = ClusterSpec(
        nodes=tuple(nodes),
        gpupool=None if args.bare else GpupoolSpec(),
        real_node=RealNodeSpec(parse_gpu_spec(DEFAULT_GPUS)) if args.real_node else None,
        **extra,
    )
    up_s: list[float] = []
    down_s: list[float] = []
    profile: dict[str, Any] | None = None
    requests: dict[str, Any] | None = None
    error: str | None = None
    with tempfile.TemporaryDirectory(prefix="gpupool-bench-") as tmp:
        audit_log = install_audit(Path(tmp)) if args.list_window > 0 else None
        for i in range(args.runs):
            cluster = DevCluster(Path(tmp) / f"run-{i}")
            prof = Profile() if args.profile and i == 0 else None
            if prof is not None:
                prof.install()
            say(f"run {i}: up with {len(nodes)} nodes")
            start = time.perf_counter()
            try:
                cluster.up(spec, die_with_parent=True)
            except Exception as err:  # report the failure in the JSON, as the CLI would say it
                error = f"{type(err).__name__}: {str(err).splitlines()[0]}"
                say(f"run {i} failed after {time.perf_counter() - start:.1f}s: {error}")
                up_s.append(time.perf_counter() - start)
                break
            up_s.append(time.perf_counter() - start)
            say(f"run {i}: up in {up_s[-1]:.1f}s")
            if prof is not None:
                profile = prof.summary()
            if i == 0 and args.list_window > 0 and not args.bare:
                say(f"settling {args.settle:g}s")
                time.sleep(args.settle)
                requests = count_lists(cluster.api(), audit_log, args.list_window, say)
            start = time.perf_counter()
            cluster.down()
            down_s.append(time.perf_counter() - start)

    def summary(values: list[float]) -> dict[str, float] | None:
        if not values:
            return None
        return {
            "median": round(statistics.median(values), 3),
            "min": round(min(values), 3),
            "max": round(max(values), 3),
        }

    result: dict[str, Any] = {
        "benchmark": "dev-cluster up/down",
        "label": args.label,
        "binaries": version_tag(),
        "nodes": len(nodes),
        "cluster_file": Path(args.cluster_file).name if args.cluster_file else None,
        "gpus_per_node": None if args.cluster_file else args.gpus,
        "gpupool": not args.bare,
        "real_node": args.real_node,
        "ready_timeout_s": spec.ready_timeout_s,
        "runs": args.runs,
        "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
        "up_s": summary(up_s),
        "down_s": summary(down_s),
    }
    if error is not None:
        result["error"] = error
    if profile is not None:
        result["profile"] = profile
    if requests is not None:
        result["idle_requests"] = requests
    emit(result, args.out, indent=2)


if __name__ == "__main__":
    main()
