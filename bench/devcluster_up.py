"""Time `gpupool dev-cluster up` and `down` with the binaries already built; print JSON.

    .venv/bin/python bench/devcluster_up.py [--runs 5] [--nodes 4] [--gpus 8xA100-80GB] [--bare]
        [--real-node]

Each run: a fresh state folder, `DevCluster.up` until every component is ready and every fake
node is Ready — by default with all of gpupool, as `gpupool dev-cluster up` runs it: CRDs
Established, extender healthy, webhook registered, a GpuNode with a heartbeat per fake node;
`--bare`: the control plane and nodes only; `--real-node`: also the real node (root; kubelet
Ready, and unless --bare the agent's gpupool.io/vgpu on it) — then `down` until no process is
left (with --real-node: every container, mount, link, rule, cgroup and sysctl undone). Times are
wall-clock seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from gpupool.devcluster import ClusterSpec, DevCluster
from gpupool.devcluster.binaries import Binaries, version_tag
from gpupool.devcluster.nodes import node_specs, parse_gpu_spec
from gpupool.devcluster.realnode.fake_gpus import DEFAULT_GPUS
from gpupool.devcluster.realnode.node import RealNodeSpec
from gpupool.devcluster.spec import GpupoolSpec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--gpus", default="8xA100-80GB")
    parser.add_argument("--bare", action="store_true", help="without gpupool's components")
    parser.add_argument("--real-node", action="store_true", help="with the real node (root)")
    args = parser.parse_args()
    Binaries.locate()  # fail early, with the build command, if anything is missing
    spec = ClusterSpec(
        nodes=tuple(node_specs(args.nodes, parse_gpu_spec(args.gpus))),
        gpupool=None if args.bare else GpupoolSpec(),
        real_node=RealNodeSpec(parse_gpu_spec(DEFAULT_GPUS)) if args.real_node else None,
        ready_timeout_s=120.0,
    )
    up_s: list[float] = []
    down_s: list[float] = []
    with tempfile.TemporaryDirectory(prefix="gpupool-bench-") as tmp:
        for i in range(args.runs):
            cluster = DevCluster(Path(tmp) / f"run-{i}")
            start = time.perf_counter()
            cluster.up(spec, die_with_parent=True)
            up_s.append(time.perf_counter() - start)
            start = time.perf_counter()
            cluster.down()
            down_s.append(time.perf_counter() - start)

    def summary(values: list[float]) -> dict[str, float]:
        return {
            "median": round(statistics.median(values), 3),
            "min": round(min(values), 3),
            "max": round(max(values), 3),
        }

    print(
        json.dumps(
            {
                "benchmark": "dev-cluster up/down",
                "binaries": version_tag(),
                "nodes": args.nodes,
                "gpus_per_node": args.gpus,
                "gpupool": not args.bare,
                "real_node": args.real_node,
                "runs": args.runs,
                "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
                "cpus": os.cpu_count(),
                "up_s": summary(up_s),
                "down_s": summary(down_s),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
