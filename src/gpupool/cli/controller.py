"""`gpupool controller`: the admission queue and lease reconcilers, optionally behind leader
election (wiring only)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from gpupool.adapters.cluster import KubeClusterApi
from gpupool.adapters.kubeclient import async_client
from gpupool.adapters.kubernetes.watch_cache import CONTROLLER_KINDS, WatchCache
from gpupool.adapters.metrics.controller import ControllerMetrics
from gpupool.adapters.metrics.defrag import DefragMetrics
from gpupool.adapters.metrics.http import parse_address, start_metrics_server
from gpupool.adapters.metrics.utilisation import (
    DEFAULT_AGENT_URL,
    AgentScrapeSource,
    PrometheusSource,
)
from gpupool.cli.daemon import (
    add_leader_args,
    configure_logging,
    elector_from_args,
    leader_args_problem,
    run_loop,
    stop_on_signals,
)
from gpupool.controllers.admission.due import next_admission_work
from gpupool.controllers.admission.reconcile import AdmissionReconciler, AdmissionRound
from gpupool.controllers.autoscale.reconcile import INTERVAL_S, AutoscaleReconciler
from gpupool.controllers.budget.drain_reconcile import BudgetDrainReconciler
from gpupool.controllers.contain import Containment
from gpupool.controllers.defrag.reconcile import DefragReconciler
from gpupool.controllers.dra.reconcile import ClaimAllocator
from gpupool.controllers.due import soonest
from gpupool.controllers.leases.plan import RESERVED_TIMEOUT_S
from gpupool.controllers.leases.reconcile import LeaseReconciler
from gpupool.controllers.manager import Changed, Loop, run_loops, whole
from gpupool.controllers.node_health.plan import LOST_S, SUSPECT_S
from gpupool.controllers.node_health.reconcile import NodeHealthReconciler
from gpupool.controllers.observe import MetricsObserver
from gpupool.controllers.pool_status.reconcile import PoolStatusReconciler
from gpupool.controllers.reclaim.reconcile import ReclaimReconciler
from gpupool.controllers.wakes import POOL_STATUS, wake_kind
from gpupool.quota.queue import FifoMode

log = logging.getLogger("gpupool.controller")
DEFAULT_METRICS_ADDRESS = ":9411"
RESYNC_S = 300.0


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "controller",
        help="run the controller: admission queue (quota gate), leases, node health, reclaim",
        description=(
            "Removes the gpupool.io/quota scheduling gate from pods in priority then FIFO order "
            "as their tenant's GpuQuota admits them, and shows each waiting pod its queue "
            "position and reason (annotation gpupool.io/queue, events, GpuQuota status); "
            "reclaims borrowed quota for tenants within their nominal quota (notice, the "
            "borrower's grace period, eviction through the Eviction API). With --leader-elect only "
            "the replica holding the coordination Lease reconciles; the others stand by."
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
        "--resync",
        type=float,
        default=RESYNC_S,
        metavar="SECONDS",
        help="the safety net: each loop runs at least this often; a watched change, or the "
        "time its timed work comes due (an expiry, a grace period's end, a heartbeat's "
        f"timeout), starts it sooner (default: {RESYNC_S:g})",
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
    parser.add_argument(
        "--metrics-address",
        default=DEFAULT_METRICS_ADDRESS,
        metavar="HOST:PORT",
        help="serve Prometheus /metrics here (quota layer, cards, leases; docs/metrics.md); "
        f"'off' serves none (default: {DEFAULT_METRICS_ADDRESS})",
    )
    parser.add_argument(
        "--autoscale-agent-url",
        default=DEFAULT_AGENT_URL,
        metavar="TEMPLATE",
        help="the node agents' /metrics, where the autoscaler reads its pods' GPU utilisation "
        "({address}: the node's InternalIP, {node}: its name; docs/autoscaling.md) "
        f"(default: {DEFAULT_AGENT_URL})",
    )
    parser.add_argument(
        "--autoscale-prometheus",
        metavar="URL",
        help="read the autoscaler's GPU utilisation from this Prometheus (which scrapes the "
        "agents) instead of the agents themselves",
    )
    parser.add_argument(
        "--autoscale-interval",
        type=float,
        default=INTERVAL_S,
        metavar="SECONDS",
        help=f"how often the autoscaler reads utilisation and decides (default: {INTERVAL_S:g})",
    )
    add_leader_args(parser, name="gpupool-controller", does="reconciles")
    parser.add_argument("--log-level", default="INFO")
    parser.set_defaults(func=run)


def _autoscale_problem(args: argparse.Namespace) -> str | None:
    if not args.autoscale_interval > 0:
        return "--autoscale-interval must be positive"
    try:
        args.autoscale_agent_url.format(node="node", address="10.0.0.1")
    except (KeyError, IndexError, ValueError):
        return (
            "--autoscale-agent-url may name only {node} and {address}, such as "
            f"{DEFAULT_AGENT_URL}; got {args.autoscale_agent_url!r}"
        )
    return None


# What owes each loop a round besides its deadlines (heartbeats never do:
# `noise.only_heartbeat`; a Node's readiness alone or a GpuQuota's status alone neither:
# `controllers.wakes`).
NODE_HEALTH_KINDS = frozenset({"gpunodes", "gpuleases"})
LEASE_KINDS = frozenset({"gpuleases", "pods", "gpuquotas", "gpunodes"})
ADMISSION_KINDS = frozenset({"pods", "gpuquotas", "gpuleases", "gpunodes", "nodes"})
WORKLOAD_KINDS = frozenset({"deployments", "statefulsets"})
DEFRAG_KINDS = frozenset({"gpupools", POOL_STATUS, "gpunodes", "pdbs"})
# /metrics and GpuPool status: after what admission reads or a GpuPool's spec changes, at most
# every OBSERVE_GAP_S (Prometheus scrapes every 15-30 s). Neither a Node's readiness alone (kwok's
# nodes flap on a loaded machine: it shows with the next round, as it did when admission's rounds
# wrote it) nor its own GpuPool status writes wake it.
OBSERVE_KINDS = ADMISSION_KINDS | {"gpupools"}
OBSERVE_GAP_S = 5.0
METRICS_LOOP = "metrics+pools"


async def follow(cache: WatchCache, changed: Changed, stop: asyncio.Event) -> None:
    """Feed the cache and tell the loops what changed, until cancelled."""
    cache.subscribe(lambda change: changed(wake_kind(change), change.key))
    await cache.run(stop)


def run(args: argparse.Namespace) -> int:
    if not 0 < args.suspect_after < args.lost_after:
        print(
            "gpupool controller: error: --suspect-after must be positive and below --lost-after",
            file=sys.stderr,
        )
        return 2
    problem = leader_args_problem(args) or _autoscale_problem(args)
    metrics_at: tuple[str, int] | None = None
    if args.metrics_address != "off":
        try:
            metrics_at = parse_address(args.metrics_address)
        except ValueError as err:
            problem = problem or f"--metrics-address: {err}"
    if problem is not None:
        print(f"gpupool controller: error: {problem}", file=sys.stderr)
        return 2
    configure_logging(args.log_level)

    async def main() -> None:
        stop = stop_on_signals()
        client = async_client(args.kubeconfig, field_manager="gpupool-controller")
        elected = asyncio.Event()  # wakes the loops at once when this replica becomes leader
        elector = elector_from_args(client, args, on_elected=elected.set)
        # Every write asks the elector first: a round that outlives the term writes nothing more.
        # Events name the replica that wrote them (reportingInstance: its --identity).
        metrics = ControllerMetrics()  # also the reconcilers' Outcomes (notices, evictions)
        # One copy of what the loops read, fed by list+watch: a round reads it, not the API server.
        cache = WatchCache(client, CONTROLLER_KINDS, observer=metrics)
        api = KubeClusterApi(
            client,
            instance=args.identity if elector else "",
            may_write=elector.is_leader if elector else None,
            cache=cache,
        )

        def contain(loop: str) -> Containment:  # one per loop: its set-aside objects, metrics
            return Containment(loop, api, observer=metrics)

        in_admission = contain("admission+reclaim")
        admission = AdmissionReconciler(
            api, time.time, mode=FifoMode(args.fifo), contain=in_admission,
            claims=ClaimAllocator(api),  # claims on gpu.gpupool.io: allocated before the gate
        )  # fmt: skip
        leases = LeaseReconciler(
            api,
            time.time,
            retention_s=args.lease_retention,
            reserved_timeout_s=args.reserved_timeout,
            on_integrity=metrics.record_integrity,
            outcomes=metrics,
            contain=contain("leases"),
        )
        nodes = NodeHealthReconciler(
            api,
            time.time,
            suspect_s=args.suspect_after,
            lost_s=args.lost_after,
            outcomes=metrics,
            contain=contain("node-health"),
        )
        reclaim = ReclaimReconciler(api, metrics, contain=in_admission)
        session = aiohttp.ClientSession()
        source = (
            PrometheusSource(session, args.autoscale_prometheus)
            if args.autoscale_prometheus
            else AgentScrapeSource(session, args.autoscale_agent_url)
        )
        autoscale = AutoscaleReconciler(
            api, api, source, time.time, interval_s=args.autoscale_interval,
            contain=contain("autoscale"),
        )  # fmt: skip
        drain = BudgetDrainReconciler(api, metrics, contain=in_admission)
        observer = MetricsObserver(api, metrics)
        defrag = DefragReconciler(
            api, time.time, DefragMetrics(metrics.registry), contain=contain("defrag")
        )
        pools = PoolStatusReconciler(api, contain=in_admission)
        runner = await start_metrics_server(metrics.registry, *metrics_at) if metrics_at else None

        last: list[AdmissionRound] = []  # the last admission round (its next timed work)

        def admission_due() -> float | None:
            if not last:
                return in_admission.next_retry(time.time())
            return soonest(next_admission_work(last[-1]), in_admission.next_retry(last[-1].now))

        async def admission_then_reclaim() -> None:
            # Reclaim decides over the admission round's reads and quota decision (one snapshot,
            # one decision); a round whose admission fails reclaims nothing until the next.
            last.clear()
            round_ = await admission.reconcile()
            last.append(round_)
            observer.admitted(round_)  # the admissions counter sees every round's
            # Reclaim's failure as a whole does not stop the drain (each contains its pods).
            try:
                await reclaim.reconcile(round_)
            finally:
                await drain.reconcile(round_)  # spent `drain` budgets: notices, evictions

        async def metrics_and_pools() -> None:
            # /metrics and GpuPool status from the last admission round (its snapshot and quota
            # decision), at most every OBSERVE_GAP_S: a pass over every card. None yet (or its
            # admission failed): nothing new to show; admission's next round owes this one.
            if not last:
                return
            round_ = last[-1]
            reading = await observer.show(round_)
            await pools.reconcile(reading.cards, round_.now)  # the same cards /metrics shows

        election = asyncio.ensure_future(elector.run(stop)) if elector else None
        try:
            await run_loops(
                [  # admission first: a new pod's gate waits for no other loop's round
                    Loop(
                        "admission+reclaim",
                        whole(admission_then_reclaim),
                        ADMISSION_KINDS,
                        due_at=admission_due,
                    ),
                    Loop(
                        METRICS_LOOP,
                        whole(metrics_and_pools),
                        OBSERVE_KINDS,
                        min_gap_s=OBSERVE_GAP_S,
                    ),
                    # per node: a round looks at the nodes that changed or came due
                    Loop("node-health", nodes.reconcile, NODE_HEALTH_KINDS, due_at=nodes.due_at),
                    # per lease: a round looks at the leases and pods that changed or came due
                    Loop("leases", leases.reconcile, LEASE_KINDS, due_at=leases.due_at),
                    Loop(
                        "autoscale",
                        whole(autoscale.reconcile),
                        WORKLOAD_KINDS,
                        due_at=autoscale.due_at,
                    ),
                    Loop("defrag", whole(defrag.reconcile), DEFRAG_KINDS, due_at=defrag.due_at),
                ],
                stop,
                resync_s=args.resync,
                watch=lambda changed: follow(cache, changed, stop),
                leading=elector.is_leader if elector else None,
                wake=elected,
                observer=metrics,
                monotonic=time.monotonic,
            )
        finally:
            if election is not None:
                election.cancel()
                await asyncio.gather(election, return_exceptions=True)
            if elector is not None:  # the round in progress has ended: another may take over now
                await elector.release()
            if runner is not None:
                await runner.cleanup()
            await session.close()
            await client.close()

    run_loop(main())
    return 0
