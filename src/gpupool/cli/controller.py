"""`gpupool controller`: the admission queue and lease reconcilers (wiring only)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from gpupool.adapters.cluster import ClusterApi
from gpupool.adapters.kubeclient import async_client
from gpupool.cli.daemon import configure_logging, run_loop, stop_on_signals
from gpupool.controllers.admission import AdmissionReconciler
from gpupool.controllers.lease_plan import RESERVED_TIMEOUT_S
from gpupool.controllers.leases import LeaseReconciler
from gpupool.controllers.manager import Loop, run_loops
from gpupool.controllers.node_health import NodeHealthReconciler
from gpupool.controllers.node_health_plan import LOST_S, SUSPECT_S
from gpupool.controllers.reclaim import ReclaimReconciler
from gpupool.quota.queue import FifoMode


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "controller",
        help="run the controller: admission queue (quota gate), leases, node health, reclaim",
        description=(
            "Removes the gpupool.io/quota scheduling gate from pods in priority then FIFO order "
            "as their tenant's GpuQuota admits them, and shows each waiting pod its queue "
            "position and reason (annotation gpupool.io/queue, events, GpuQuota status); "
            "reclaims borrowed quota for tenants within their nominal quota (notice, the "
            "borrower's grace period, eviction through the Eviction API)."
        ),
    )
    parser.add_argument("--kubeconfig", type=Path, help="kubeconfig (default: in-cluster, ...)")
    parser.add_argument(
        "--fifo",
        choices=[m.value for m in FifoMode],
        default=FifoMode.BEST_EFFORT.value,
        help="strict: a tenant's first waiting pod holds back the rest; best-effort: smaller "
        "pods behind it may go (default: best-effort)",
    )
    parser.add_argument(
        "--resync", type=float, default=5.0, metavar="SECONDS", help="full reconcile period"
    )
    parser.add_argument(
        "--lease-retention",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="how long an ended GpuLease is kept before it is deleted (default: 3600)",
    )
    parser.add_argument(
        "--reserved-timeout",
        type=float,
        default=RESERVED_TIMEOUT_S,
        metavar="SECONDS",
        help="a GpuLease still Reserved this long after it was made, its pod bound to no node, "
        f"is deleted (default: {RESERVED_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--suspect-after",
        type=float,
        default=SUSPECT_S,
        metavar="SECONDS",
        help=f"a GpuNode without a heartbeat this long is Suspect (default: {SUSPECT_S:g})",
    )
    parser.add_argument(
        "--lost-after",
        type=float,
        default=LOST_S,
        metavar="SECONDS",
        help=f"... and this long Lost: its leases end, its GPU pods are deleted (default: "
        f"{LOST_S:g})",
    )
    parser.add_argument("--log-level", default="INFO")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not 0 < args.suspect_after < args.lost_after:
        print(
            "gpupool controller: error: --suspect-after must be positive and below --lost-after",
            file=sys.stderr,
        )
        return 2
    configure_logging(args.log_level)

    async def main() -> None:
        stop = stop_on_signals()
        client = async_client(args.kubeconfig, field_manager="gpupool-controller")
        api = ClusterApi(client)
        admission = AdmissionReconciler(api, time.time, mode=FifoMode(args.fifo))
        leases = LeaseReconciler(
            api,
            time.time,
            retention_s=args.lease_retention,
            reserved_timeout_s=args.reserved_timeout,
        )
        nodes = NodeHealthReconciler(
            api, time.time, suspect_s=args.suspect_after, lost_s=args.lost_after
        )
        reclaim = ReclaimReconciler(api, time.time, mode=FifoMode(args.fifo))
        try:
            await run_loops(
                [
                    Loop("node-health", nodes.reconcile),
                    Loop("leases", leases.reconcile),
                    Loop("admission", admission.reconcile),
                    Loop("reclaim", reclaim.reconcile),
                ],
                stop,
                resync_s=args.resync,
                watch=api.watch_changes,
            )
        finally:
            await client.close()

    run_loop(main())
    return 0
