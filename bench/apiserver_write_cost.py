"""The kube-apiserver's CPU per write, for the writes a pod costs with and without gpupool; prints
JSON.

    .venv/bin/python bench/apiserver_write_cost.py [--writes 600] [--concurrency 32]

Why: bench/scheduler_throughput.py compares pods per second through kube-scheduler with and
without the extender. Where the API server is the bottleneck (it is on a small machine), that
ratio cannot beat the ratio of the API server's work per pod: kube-scheduler alone makes one
Binding per pod; gpupool's bind makes a GpuLease and a Binding that carries the allocation
annotations (both required: DESIGN.md section 6). This measures each write on its own.

One bare dev cluster (etcd, kube-apiserver, kube-scheduler, kwok; two fake nodes), the CRDs applied.
Each phase posts `--writes` objects with `--concurrency` in flight, through the same client the
extender's bind uses (FastPoster), and reads the CPU time (utime + stime, /proc/<pid>/stat) the
API server and etcd used during the phase. Pods are created with a scheduler name nobody serves,
so no scheduler or kwok work mixes in before the Bindings. Phases, in order: pods; GpuLeases
(a warm-up batch first: the first writes to a new CRD are slower); Bindings with gpupool's two
annotations; plain Bindings.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bare_cluster import cpu_seconds, on_bare_cluster

from gpupool.adapters.kubeclient import async_client, kube_config
from gpupool.adapters.kubernetes.crds import apply_crds
from gpupool.adapters.kubernetes.fast_post import FastPoster
from gpupool.adapters.kubernetes.lease import lease_to_json
from gpupool.adapters.kubernetes.pod import allocation_annotation
from gpupool.adapters.wire.names import API_VERSION
from gpupool.devcluster.binaries import version_tag
from gpupool.domain.allocations import Allocation, Slice
from gpupool.domain.units import GiB
from gpupool.state.lease import LeaseRecord, PodRef

NODE = "gpu-node-0"


def pod_body(ns: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "schedulerName": "nobody",
            "containers": [
                {"name": "c", "image": "registry.example/bench:1",
                 "resources": {"limits": {"cpu": "10m"}}}
            ],
        },
    }  # fmt: skip


def one_slice() -> Slice:
    return Slice(
        gpu_index=0, uuid="GPU-bench-0", model="A100-80GB", offset_bytes=0,
        size_bytes=GiB, compute_milli=0,
    )  # fmt: skip


def lease_body(ns: str, name: str, pod: str, uid: str) -> dict[str, Any]:
    record = LeaseRecord(
        name=name, namespace=ns, tenant="default", pod=PodRef(ns, pod, uid), node=NODE,
        slices=(one_slice(),), amount=GiB,
    )  # fmt: skip
    return lease_to_json(record)


def binding_body(ns: str, pod: str, uid: str, annotated: bool) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": pod, "namespace": ns, "uid": uid}
    if annotated:
        allocation = Allocation(
            request=pod, node=NODE, cpu_milli=0, memory_mib=0, slices=(one_slice(),)
        )
        meta["annotations"] = {
            "gpupool.io/allocation": allocation_annotation(allocation),
            "gpupool.io/lease": f"{ns}/{uid}",
        }
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": meta,
        "target": {"apiVersion": "v1", "kind": "Node", "name": NODE},
    }


async def measure(kubeconfig: Path, pids: dict[str, int], writes: int, concurrency: int) -> Any:
    client = async_client(kubeconfig, field_manager="gpupool-bench")
    await apply_crds(client)
    await client.close()
    poster = FastPoster.from_config(kube_config(kubeconfig))
    limit = asyncio.Semaphore(concurrency)
    ns = f"bench-writes-{secrets.token_hex(3)}"
    await poster.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                             "metadata": {"name": ns}})  # fmt: skip
    phases: list[dict[str, Any]] = []

    async def post(path: str, body: dict[str, Any]) -> bytes:
        async with limit:
            return await poster.post(path, body)

    async def phase(
        name: str, n: int, item: Callable[[int], tuple[str, dict[str, Any]]]
    ) -> list[bytes]:
        cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}
        t0 = time.perf_counter()
        replies = await asyncio.gather(*(post(*item(i)) for i in range(n)))
        wall = time.perf_counter() - t0
        row: dict[str, Any] = {"phase": name, "writes": n, "seconds": round(wall, 3),
                               "writes_per_s": round(n / wall, 1)}  # fmt: skip
        for k, p in pids.items():
            row[f"{k}_cpu_ms_per_write"] = round(1000 * (cpu_seconds(p) - cpu0[k]) / n, 3)
        print(json.dumps(row), file=sys.stderr, flush=True)
        phases.append(row)
        return replies

    try:
        pods_path = f"/api/v1/namespaces/{ns}/pods"
        replies = await phase("pod create", writes, lambda i: (pods_path, pod_body(ns, f"p{i}")))
        uids = [json.loads(r)["metadata"]["uid"] for r in replies]
        leases_path = f"/apis/{API_VERSION}/namespaces/{ns}/gpuleases"
        warm = min(100, writes)

        def lease(prefix: str) -> Callable[[int], tuple[str, dict[str, Any]]]:
            return lambda i: (leases_path, lease_body(ns, f"{prefix}{uids[i]}", f"p{i}", uids[i]))

        await phase("gpulease create (warm-up)", warm, lease("warm-"))
        await phase("gpulease create", writes, lease(""))
        half = writes // 2

        def binding(offset: int, annotated: bool) -> Callable[[int], tuple[str, dict[str, Any]]]:
            def item(i: int) -> tuple[str, dict[str, Any]]:
                j = offset + i
                return (f"{pods_path}/p{j}/binding", binding_body(ns, f"p{j}", uids[j], annotated))

            return item

        await phase("binding with gpupool annotations", half, binding(0, True))
        await phase("binding (kube-scheduler's)", writes - half, binding(half, False))
    finally:
        await poster.close()
    return phases


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--writes", type=int, default=600)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    phases = on_bare_cluster(
        "gpupool-write-cost-",
        2,
        lambda kubeconfig, pids: measure(kubeconfig, pids, args.writes, args.concurrency),
    )
    by = {row["phase"]: row["kube-apiserver_cpu_ms_per_write"] for row in phases}
    plain = by["binding (kube-scheduler's)"]
    gpupool = by["gpulease create"] + by["binding with gpupool annotations"]
    print(json.dumps({
        "benchmark": "kube-apiserver CPU per write: kube-scheduler's bind vs gpupool's bind",
        "binaries": version_tag(),
        "writes_per_phase": args.writes,
        "concurrency": args.concurrency,
        "cpus": os.cpu_count(),
        "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
        "apiserver_cpu_ms_per_bind": {"kube-scheduler": plain, "gpupool": round(gpupool, 3)},
        "phases": phases,
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
