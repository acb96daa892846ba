"""What every long-running gpupool command shares: log setup, stopping on SIGINT/SIGTERM, and
the event loop (uvloop: the extender's one loop serves kube-scheduler's filter, prioritize and
bind calls and the API writes behind them; uvloop's transports cost it measurably less CPU per
request than asyncio's, see README "Scheduler throughput")."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import socket
from collections.abc import Callable, Coroutine
from typing import Any

import uvloop
from lightkube import AsyncClient

from gpupool.adapters.kubernetes.leader import LeaderElector

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(level: object) -> None:
    logging.basicConfig(level=getattr(logging, str(level).upper(), logging.INFO), format=LOG_FORMAT)
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # one line per API request otherwise


def stop_on_signals() -> asyncio.Event:
    """An event set by SIGINT or SIGTERM; call it inside the running event loop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


# The cyclic GC's young generation is collected after this many more allocations than frees
# (Python's default: 700). A daemon holds large caches and makes values that live a round or two
# (decoded objects, kept plans); at 700 those survive young collections, are promoted, and the
# old generation's count of newcomers soon passes the quarter of it that sets off a full
# collection, a walk of the whole heap: at 7,500 pods half of the admission rounds' CPU and a
# p90 seven times their median (bench/admission_rounds.py's harness, 60 rounds: 3.0 s of CPU at
# 700, 1.5 s at 10,000-50,000, p90 190 ms against 28 ms). The older generations keep theirs.
GC_YOUNG_THRESHOLD = 20_000


def run_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run a daemon's main coroutine to completion on a uvloop event loop, with the cyclic GC
    tuned for a long-lived heap (`GC_YOUNG_THRESHOLD`)."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)
    uvloop.run(main)


def add_leader_args(parser: argparse.ArgumentParser, *, name: str, does: str) -> None:
    """The leader-election flags shared by the replicated daemons (extender, controller): `name`
    is the default coordination Lease, `does` what only the leader does ("binds", "reconciles")."""
    parser.add_argument(
        "--leader-elect",
        action="store_true",
        help=f"only the replica holding the coordination Lease {does} (run 2 or more)",
    )
    parser.add_argument("--leader-namespace", default="gpupool-system")
    parser.add_argument("--leader-name", default=name)
    parser.add_argument("--identity", default=f"{socket.gethostname()}-{os.getpid()}")
    parser.add_argument(
        "--leader-lease-seconds",
        type=int,
        default=15,
        help="a silent leader's lease is taken over after this",
    )
    parser.add_argument(
        "--leader-renew-deadline-seconds",
        type=float,
        default=10.0,
        help=f"a leader that could not renew for this long stops ({does} no more; under the lease)",
    )
    parser.add_argument("--leader-retry-seconds", type=float, default=2.0)


def leader_args_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the leader-election flags, or None."""
    if args.leader_elect and not args.leader_renew_deadline_seconds < args.leader_lease_seconds:
        return "--leader-renew-deadline-seconds must be below --leader-lease-seconds"
    return None


def elector_from_args(
    client: AsyncClient,
    args: argparse.Namespace,
    *,
    on_elected: Callable[[], None],
    advertise_url: str | None = None,
) -> LeaderElector | None:
    """The coordination-Lease elector the flags ask for; None without --leader-elect."""
    if not args.leader_elect:
        return None
    return LeaderElector(
        client,
        args.leader_namespace,
        args.leader_name,
        args.identity,
        lease_s=args.leader_lease_seconds,
        renew_deadline_s=args.leader_renew_deadline_seconds,
        retry_s=args.leader_retry_seconds,
        on_elected=on_elected,
        advertise_url=advertise_url,
    )
