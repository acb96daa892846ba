"""The kube-apiserver's CPU for the one read the extender's bind makes: a node's GpuLeases, listed
consistently (its ledger, re-read when older than 10 s); prints JSON.

    .venv/bin/python bench/lease_list_cost.py [--leases 3000] [--nodes 50] [--lists 60]

Why: with the extender, kube-scheduler's throughput is bound by the machine's CPU, most of the
difference from plain pods being kube-apiserver's (bench/scheduler_throughput.py). The ledger's
list selects one node's leases among all of them by the field `spec.node` (a CRD selectable
field); the leases also carry the label `gpupool.io/node`. This measures, per list of one node's
`--leases / --nodes` leases among `--leases`: the field-selected consistent list (what the
ledger does), the label-selected consistent list, and the field-selected list served from the
watch cache at any version (`resourceVersion=0`, not consistent: what the ledger may not use).

One bare dev cluster (etcd, kube-apiserver, kube-scheduler, kwok; two fake nodes), the CRDs
applied, the leases created through the extender's writer (FastPoster); each phase lists
`--lists` times, one node after the other, and reads the CPU time kube-apiserver and etcd used
(utime + stime, /proc).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from apiserver_write_cost import one_slice
from bare_cluster import cpu_seconds, on_bare_cluster

from gpupool.adapters.kubeclient import async_client, kube_config
from gpupool.adapters.kubernetes.crds import apply_crds
from gpupool.adapters.kubernetes.fast_post import FastPoster
from gpupool.adapters.kubernetes.lease import lease_to_json
from gpupool.adapters.wire.names import API_VERSION, LABEL_NODE
from gpupool.devcluster.binaries import version_tag
from gpupool.domain.units import GiB
from gpupool.state.lease import LeaseRecord, PodRef

NS = "bench-lists"
LEASES = f"/apis/{API_VERSION}/gpuleases"


def lease(i: int, nodes: int) -> dict[str, Any]:
    record = LeaseRecord(
        name=f"lease-{i}", namespace=NS, tenant="default",
        pod=PodRef(NS, f"p{i}", f"uid-{i}"), node=f"node-{i % nodes}",
        slices=(one_slice(),), amount=GiB,
    )  # fmt: skip
    return lease_to_json(record)


async def measure(
    kubeconfig: Path, pids: dict[str, int], leases: int, nodes: int, lists: int
) -> list[dict[str, Any]]:
    client = async_client(kubeconfig, field_manager="gpupool-bench")
    await apply_crds(client)
    await client.close()
    poster = FastPoster.from_config(kube_config(kubeconfig))
    await poster.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                             "metadata": {"name": NS}})  # fmt: skip
    limit = asyncio.Semaphore(32)

    async def create(i: int) -> None:
        async with limit:
            await poster.post(f"/apis/{API_VERSION}/namespaces/{NS}/gpuleases", lease(i, nodes))

    await asyncio.gather(*(create(i) for i in range(leases)))
    session = poster._client()  # the writer's own session: its TLS and credentials
    headers = poster._headers()
    rows: list[dict[str, Any]] = []
    queries = {
        "field-selected, consistent (the ledger's)": "fieldSelector=spec.node%3D{node}",
        "label-selected, consistent": f"labelSelector={quote(LABEL_NODE)}%3D{{node}}",
        "field-selected, watch cache (resourceVersion=0)": (
            "fieldSelector=spec.node%3D{node}&resourceVersion=0"
        ),
    }
    try:
        for name, query in queries.items():
            cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}
            t0 = time.perf_counter()
            found = 0
            for i in range(lists):
                url = f"{poster.server}{LEASES}?{query.format(node=f'node-{i % nodes}')}"
                async with session.get(url, headers=headers) as resp:
                    resp.raise_for_status()
                    found += len((await resp.json())["items"])
            wall = time.perf_counter() - t0
            row: dict[str, Any] = {"list": name, "lists": lists, "leases_per_list": found / lists,
                                   "ms_per_list": round(1000 * wall / lists, 2)}  # fmt: skip
            for k, p in pids.items():
                row[f"{k}_cpu_ms_per_list"] = round(1000 * (cpu_seconds(p) - cpu0[k]) / lists, 2)
            print(json.dumps(row), file=sys.stderr, flush=True)
            rows.append(row)
    except aiohttp.ClientError as err:
        raise SystemExit(f"listing GpuLeases failed: {err}") from None
    finally:
        await poster.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--leases", type=int, default=3000)
    parser.add_argument("--nodes", type=int, default=50, help="node names the leases spread on")
    parser.add_argument("--lists", type=int, default=60, help="lists per phase")
    args = parser.parse_args()
    if min(args.leases, args.nodes, args.lists) < 1:
        parser.error("--leases, --nodes and --lists must be at least 1")
    rows = on_bare_cluster(
        "gpupool-list-cost-",
        2,
        lambda kubeconfig, pids: measure(kubeconfig, pids, args.leases, args.nodes, args.lists),
    )
    print(json.dumps({
        "benchmark": "kube-apiserver CPU per list of one node's GpuLeases",
        "binaries": version_tag(),
        "leases": args.leases,
        "nodes": args.nodes,
        "cpus": os.cpu_count(),
        "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
        "phases": rows,
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
