"""What the API-server cost benchmarks share: a bare dev cluster (etcd, kube-apiserver,
kube-scheduler, kwok and a few fake 8xA100-80GB nodes; no gpupool component) to run one
measurement on, and the CPU time of the processes they measure, read from /proc."""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from gpupool.devcluster import ClusterSpec, DevCluster
from gpupool.devcluster.nodes import node_specs, parse_gpu_spec

MEASURED = ("kube-apiserver", "etcd")
T = TypeVar("T")


def cpu_seconds(pid: int) -> float:
    """utime + stime of process `pid`."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def on_bare_cluster(
    prefix: str, nodes: int, measure: Callable[[Path, dict[str, int]], Coroutine[Any, Any, T]]
) -> T:
    """Bring a bare cluster of `nodes` fake nodes up, run `measure(kubeconfig, {name: pid} of
    MEASURED)` to its end, and bring the cluster down (whatever happened)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        cluster = DevCluster(Path(tmp) / "cluster")
        spec = ClusterSpec(nodes=tuple(node_specs(nodes, parse_gpu_spec("8xA100-80GB"))))
        state = cluster.up(spec, die_with_parent=True)
        try:
            pids = {p.name: p.pid for p in state.processes if p.name in MEASURED}
            return asyncio.run(measure(Path(state.kubeconfig), pids))
        finally:
            cluster.down()
