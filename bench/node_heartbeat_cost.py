"""What one node heartbeat costs the API server: the GpuNode status write (before) against the
node's Lease renewed by a merge patch or by a replace with its resourceVersion (after); prints JSON.

    .venv/bin/python bench/node_heartbeat_cost.py [--nodes 200] [--rounds 3] [--concurrency 32]

Why: issue 24 (1,213 nodes) — every heartbeat rewrote the GpuNode's status, a few kilobytes that
every GpuNode watcher (the extender's informer, the controller, the web view) receives and
decodes. Now the agent renews a small Lease and writes the GpuNode only on change. This measures
each way of beating on its own, on one bare dev cluster (the CRDs applied, `--nodes` GpuNodes with
an 8-card status as the fake agents write it, and as many Leases):

- "gpunode status": a merge patch of the whole status, one field changed per write, as each
  heartbeat wrote it (the CRD no longer has `heartbeat`, and an unchanged status would be a
  no-op the API server skips, so `agentVersion` carries the changing time here: same size);
- "lease merge patch": `{"spec": {holderIdentity, leaseDurationSeconds, renewTime}}` (what
  `node_lease.renew_node_lease` sends);
- "lease replace": a PUT of the whole Lease with the resourceVersion of the last reply (kubelet's
  way; no read first, the reply is kept).

Per phase: the API server's and etcd's CPU time per write (utime + stime from /proc), the request
body's bytes, and the bytes of one watch event (the object as a watcher decodes it: each GpuNode
watcher gets one per heartbeat; of the Leases, only the controller's watch cache). The projection
multiplies by the 1,213-node cluster's heartbeats per second (one per node per 10 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

from bare_cluster import cpu_seconds, on_bare_cluster
from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Namespace
from lightkube.types import PatchType

from gpupool.adapters.kubeclient import async_client
from gpupool.adapters.kubernetes.crds import apply_crds
from gpupool.adapters.kubernetes.node_lease import NODE_LEASE_NAMESPACE, renewal
from gpupool.adapters.kubernetes.resources import GpuNode, to_dict
from gpupool.adapters.wire.names import API_VERSION
from gpupool.devcluster.binaries import version_tag
from gpupool.devcluster.heartbeat import fake_status

CLUSTER_NODES = 1213  # issue 24's Alibaba cluster
PERIOD_S = 10.0  # the dev cluster's heartbeat period
WATCHERS = 3  # GpuNode watchers: the extender's informer, the controller, the web view
LEASE_WATCHERS = 1  # the controller's watch cache


def as_lease(obj: dict[str, Any]) -> Lease:
    return cast(Lease, Lease.from_dict(obj))


def size(obj: Any) -> int:
    return len(json.dumps(obj, separators=(",", ":")))


async def setup(client: AsyncClient, names: list[str]) -> dict[str, dict[str, Any]]:
    """The GpuNodes with their status, the namespace and a Lease per node; the Leases' JSON."""
    await apply_crds(client)
    await client.create(Namespace(metadata=ObjectMeta(name=NODE_LEASE_NAMESPACE)))
    leases: dict[str, dict[str, Any]] = {}
    for name in names:
        await client.create(
            GpuNode(apiVersion=API_VERSION, kind="GpuNode", metadata={"name": name}, spec={})
        )
        await client.patch(
            GpuNode.Status, name, {"status": fake_status(name, "8xA100-80GB")},
            patch_type=PatchType.MERGE,
        )  # fmt: skip
        made = await client.create(
            as_lease({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": NODE_LEASE_NAMESPACE},
                "spec": renewal("gpupool-agent", 30, time.time()),
            })
        )  # fmt: skip
        leases[name] = to_dict(made)
    return leases


async def measure(
    kubeconfig: Path, pids: dict[str, int], nodes: int, rounds: int, concurrency: int
) -> list[dict[str, Any]]:
    client = async_client(kubeconfig, field_manager="gpupool-bench")
    names = [f"hb-{i:04d}" for i in range(nodes)]
    leases = await setup(client, names)
    limit = asyncio.Semaphore(concurrency)
    rows: list[dict[str, Any]] = []

    async def phase(name: str, write: Callable[[str, int], Awaitable[tuple[int, int]]]) -> None:
        async def one(node: str, r: int) -> tuple[int, int]:
            async with limit:
                return await write(node, r)

        cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}
        t0 = time.perf_counter()
        sizes: list[tuple[int, int]] = []
        for r in range(rounds):  # a round: every node beats once
            sizes += await asyncio.gather(*(one(n, r) for n in names))
        wall = time.perf_counter() - t0
        n = len(sizes)
        row: dict[str, Any] = {
            "phase": name,
            "writes": n,
            "seconds": round(wall, 3),
            "request_bytes": round(sum(s[0] for s in sizes) / n),
            "watch_event_bytes": round(sum(s[1] for s in sizes) / n),
        }
        for k, p in pids.items():
            row[f"{k}_cpu_ms_per_write"] = round(1000 * (cpu_seconds(p) - cpu0[k]) / n, 3)
        print(json.dumps(row), file=sys.stderr, flush=True)
        rows.append(row)

    async def gpunode_status(node: str, r: int) -> tuple[int, int]:
        status = fake_status(node, "8xA100-80GB")
        status["agentVersion"] = f"{time.time():.6f}"  # stands in for the old heartbeat time
        body = {"status": status}
        reply = await client.patch(GpuNode.Status, node, body, patch_type=PatchType.MERGE)
        return size(body), size(to_dict(reply))

    async def lease_patch(node: str, r: int) -> tuple[int, int]:
        body = {"spec": renewal("gpupool-agent", 30, time.time())}
        reply = to_dict(
            await client.patch(
                Lease, node, body, namespace=NODE_LEASE_NAMESPACE, patch_type=PatchType.MERGE
            )
        )
        leases[node] = reply  # the replace phase starts from the latest version
        return size(body), size(reply)

    async def lease_replace(node: str, r: int) -> tuple[int, int]:
        body = leases[node]
        body["spec"] = {**body["spec"], **renewal("gpupool-agent", 30, time.time())}
        reply = to_dict(await client.replace(as_lease(body)))
        leases[node] = reply
        return size(body), size(reply)

    try:
        await phase("gpunode status (warm-up)", gpunode_status)
        await phase("gpunode status", gpunode_status)
        # each Lease way twice, interleaved: on a shared machine one phase alone is noisy
        await phase("lease merge patch", lease_patch)
        await phase("lease replace", lease_replace)
        await phase("lease merge patch (again)", lease_patch)
        await phase("lease replace (again)", lease_replace)
    finally:
        await client.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    rows = on_bare_cluster(
        "gpupool-heartbeat-cost-",
        1,
        lambda kubeconfig, pids: measure(
            kubeconfig, pids, args.nodes, args.rounds, args.concurrency
        ),
    )
    by = {row["phase"]: row for row in rows}
    per_s = CLUSTER_NODES / PERIOD_S

    def projected(phase: str, watchers: int) -> dict[str, float]:
        """Per second at 1,213 nodes; CPU from the mean of the phase's runs."""
        runs = [r for name, r in by.items() if name in (phase, f"{phase} (again)")]
        row = runs[0]
        cpu_ms = sum(
            r["kube-apiserver_cpu_ms_per_write"] + r["etcd_cpu_ms_per_write"] for r in runs
        ) / len(runs)
        return {
            "cpu_ms_per_write": round(cpu_ms, 3),
            "writes_per_s": round(per_s, 1),
            "apiserver_and_etcd_cpu_cores": round(per_s * cpu_ms / 1000, 3),
            "request_kib_per_s": round(per_s * row["request_bytes"] / 1024, 1),
            "watch_kib_per_s": round(per_s * row["watch_event_bytes"] * watchers / 1024, 1),
        }

    print(json.dumps({
        "benchmark": "API server cost of one node heartbeat: GpuNode status vs node Lease",
        "binaries": version_tag(),
        "nodes": args.nodes,
        "rounds": args.rounds,
        "concurrency": args.concurrency,
        "cpus": os.cpu_count(),
        "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
        "phases": rows,
        "projected_1213_nodes_every_10s": {
            "before (gpunode status, 3 watchers)": projected("gpunode status", WATCHERS),
            "after (lease merge patch, 1 watcher)": projected("lease merge patch", LEASE_WATCHERS),
            "after (lease replace, 1 watcher)": projected("lease replace", LEASE_WATCHERS),
        },
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
