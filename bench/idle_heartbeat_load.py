"""What an idle dev cluster with all of gpupool asks of the API server per minute; prints JSON.

    .venv/bin/python bench/idle_heartbeat_load.py [--nodes 100] [--gpus 8xA100-80GB]
        [--settle 30] [--window 60] [--label after] [--out bench/results/NAME.json]

Why: issue 24, heartbeats that scale. On an idle cluster (no pods) the heartbeats are nearly all
the API server's write load, and what its watchers receive. Before the node Leases every heartbeat
rewrote each GpuNode's status, and every GpuNode watcher (the extender's informer, the
controller, the web view) received it; now a heartbeat renews a small Lease nobody watches. Run it
with the code before (PYTHONPATH of a checkout without the Leases) and after, same flags.

`gpupool dev-cluster up` as a user runs it (`--nodes` fake GPU nodes, heartbeat every 10 s,
controller resync 5 s, web view on), `--settle` seconds, then over `--window` seconds: requests per
(verb, resource) from the API server's `apiserver_request_total`, watch events and their bytes
per resource from `apiserver_watch_events_sizes` (what the API server sent its watchers), and
the CPU time (utime + stime) of kube-apiserver, etcd and each gpupool process; all per minute.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from emit import emit

from gpupool.devcluster import ClusterSpec, DevCluster
from gpupool.devcluster.binaries import version_tag
from gpupool.devcluster.nodes import node_specs, parse_gpu_spec
from gpupool.devcluster.spec import GpupoolSpec

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
WRITES = ("POST", "PUT", "PATCH", "DELETE", "create", "update", "patch", "delete")


def samples(metrics: str, name: str) -> list[tuple[dict[str, str], float]]:
    out = []
    for line in metrics.splitlines():
        match = _SAMPLE.match(line)
        if match is not None and match["name"] == name:
            out.append((dict(_LABEL.findall(match["labels"])), float(match["value"])))
    return out


def reading(metrics: str) -> dict[str, Counter[str]]:
    """Requests by `verb resource[/sub]`, watch events and bytes by `group/resource`."""
    requests: Counter[str] = Counter()
    for labels, value in samples(metrics, "apiserver_request_total"):
        resource = labels.get("resource", "")
        if labels.get("subresource"):
            resource += "/" + labels["subresource"]
        requests[f"{labels.get('verb', '')} {resource}"] += int(value)
    events: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    for name, into in (
        ("apiserver_watch_events_sizes_count", events),
        ("apiserver_watch_events_sizes_sum", sizes),
    ):
        for labels, value in samples(metrics, name):
            kind = labels.get("resource") or labels.get("kind", "")
            into[f"{labels.get('group', '')}/{kind}"] += int(value)
    return {"requests": requests, "watch_events": events, "watch_bytes": sizes}


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def per_minute(before: Counter[str], after: Counter[str], window_s: float) -> dict[str, float]:
    delta = {k: (after[k] - before[k]) * 60 / window_s for k in after}
    return {k: round(v, 1) for k, v in sorted(delta.items(), key=lambda kv: -kv[1]) if v > 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--gpus", default="8xA100-80GB")
    parser.add_argument("--settle", type=float, default=30.0)
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--label", default="")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpupool-idle-load-") as tmp:
        cluster = DevCluster(Path(tmp) / "cluster")
        spec = ClusterSpec(
            nodes=tuple(node_specs(args.nodes, parse_gpu_spec(args.gpus))),
            gpupool=GpupoolSpec(),
            ready_timeout_s=600.0,
        )
        state = cluster.up(spec, die_with_parent=True)
        try:
            api = cluster.api()
            time.sleep(args.settle)
            pids = {p.name: p.pid for p in state.processes}
            cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
            first = reading(str(api.get("/metrics")))
            t0 = time.monotonic()
            time.sleep(args.window)
            last = reading(str(api.get("/metrics")))
            window = time.monotonic() - t0
            cpu = {
                name: round((cpu_seconds(pid) - cpu0[name]) * 60 / window, 2)
                for name, pid in pids.items()
            }
        finally:
            cluster.down()
    requests = per_minute(first["requests"], last["requests"], window)
    result: dict[str, Any] = {
        "benchmark": "an idle dev cluster with all of gpupool: API server load per minute",
        "label": args.label,
        "binaries": version_tag(),
        "nodes": args.nodes,
        "gpus": args.gpus,
        "window_s": round(window, 1),
        "cpus": os.cpu_count(),
        "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
        "writes_per_minute": {k: v for k, v in requests.items() if k.split(" ")[0] in WRITES},
        "requests_per_minute": requests,
        "watch_events_per_minute": per_minute(first["watch_events"], last["watch_events"], window),
        "watch_bytes_per_minute": per_minute(first["watch_bytes"], last["watch_bytes"], window),
        "cpu_seconds_per_minute": dict(sorted(cpu.items(), key=lambda kv: -kv[1])),
    }
    emit(result, args.out, indent=2)
    print(f"done: {args.label or 'run'}", file=sys.stderr)


if __name__ == "__main__":
    main()
