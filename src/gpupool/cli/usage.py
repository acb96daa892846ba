"""`gpupool usage`: GiB-hours and GPU-hours per tenant, namespace or pod over a period, from the
GpuLeases (the live cluster through the kubeconfig, or a file of them: `kubectl get gpuleases -A
-o json`, or a replay's export), as a table, CSV or JSON, so each tenant can be sent its bill.

Wiring only: the sums are `quota.usage`, a lease's holding `state.usage`. The numbers are the
controller's (`gpupool_controller_tenant_gib_hours` counts the same leases the same way), and
cover the leases the API server still holds: ended ones are deleted after the controller's
--lease-retention (or the end of their budget window), so bill from a period within it, or keep
the exported files.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import json
import logging
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpupool.adapters.kubernetes.decoded import leases_listed
from gpupool.controllers.reads import read_leases
from gpupool.domain.errors import GpupoolError
from gpupool.ports import Json
from gpupool.quota.usage import UsageBy, UsageRow, usage
from gpupool.rfc3339 import format_time, parse_time
from gpupool.state.lease import LeaseRecord
from gpupool.state.listed import Listed
from gpupool.state.usage import held_of

log = logging.getLogger("gpupool.usage")
_AGO = re.compile(r"^(\d+(?:\.\d+)?)(m|h|d)$")
_UNIT_S = {"m": 60.0, "h": 3600.0, "d": 86400.0}
ROUND = 6  # decimals of hours in CSV and JSON (about 4 ms of a GiB)


class InvalidPeriod(GpupoolError):
    """--since or --until is not a time gpupool usage can read."""


class LeaseFileError(GpupoolError):
    """--from-file cannot be read as GpuLeases (the message says where and why)."""


def read_when(text: str, now: float, flag: str) -> float:
    """An RFC 3339 time, or a span before now: 90m, 24h, 30d."""
    ago = _AGO.match(text)
    if ago:
        return now - float(ago.group(1)) * _UNIT_S[ago.group(2)]
    when = parse_time(text)
    if when is None:
        raise InvalidPeriod(
            f"{flag} takes an RFC 3339 time such as 2026-01-01T00:00:00Z, or a span before now "
            f"such as 90m, 24h or 30d; got {text!r}"
        )
    return when


def leases_from_file(path: Path) -> list[Json]:
    """A GpuLease List (kubectl -o json), a JSON array of GpuLeases, or one GpuLease a line."""
    try:
        text = path.read_text()
    except OSError as err:
        raise LeaseFileError(f"cannot read {path}: {err.strerror}") from err
    try:
        loaded: Any = json.loads(text)
    except json.JSONDecodeError:
        try:
            loaded = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as err:
            raise LeaseFileError(
                f"{path} is neither JSON (a GpuLease List or array) nor one GpuLease per line: "
                f"line {err.lineno}: {err.msg}"
            ) from err
    items = loaded.get("items") if isinstance(loaded, dict) else loaded
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise LeaseFileError(f"{path} holds no list of GpuLease objects")
    return items


async def _live_leases(kubeconfig: Path | None) -> Listed[LeaseRecord]:
    from gpupool.adapters.cluster import KubeClusterApi
    from gpupool.adapters.kubeclient import async_client

    client = async_client(kubeconfig, field_manager="gpupool-usage")
    try:
        return await KubeClusterApi(client).leases()  # reads only
    finally:
        await client.close()


def report(
    leases: Listed[LeaseRecord], since: float, until: float, by: UsageBy, now: float
) -> tuple[UsageRow, ...]:
    """The rows of the leases that read (an unreadable one is logged and left out)."""
    held = [held_of(le, now) for le in read_leases(leases, log)]
    return usage(held, since, until, by)


def as_table(rows: Sequence[UsageRow], by: UsageBy) -> str:
    grouped = ["TENANT", "NAMESPACE", "POD"][: {"tenant": 1, "namespace": 2, "pod": 3}[by.value]]
    head = [*grouped, "GIB-HOURS", "GPU-HOURS", "LEASES"]
    lines = [head]
    for r in rows:
        keys = [r.tenant, r.namespace, r.pod][: len(grouped)]
        lines.append([*keys, f"{r.gib_hours:.3f}", f"{r.gpu_hours:.3f}", str(r.leases)])
    total_gib = sum(r.gib_hours for r in rows)
    total_gpu = sum(r.gpu_hours for r in rows)
    lines.append(["TOTAL", *([""] * (len(head) - 4)), f"{total_gib:.3f}", f"{total_gpu:.3f}",
                  str(sum(r.leases for r in rows))])  # fmt: skip
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    return "".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() + "\n"
        for line in lines
    )


def as_csv(rows: Sequence[UsageRow]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["tenant", "namespace", "pod", "gib_hours", "gpu_hours", "leases"])
    for r in rows:
        writer.writerow([r.tenant, r.namespace, r.pod, round(r.gib_hours, ROUND),
                         round(r.gpu_hours, ROUND), r.leases])  # fmt: skip
    return out.getvalue()


def as_json(rows: Sequence[UsageRow], since: float, until: float, by: UsageBy) -> str:
    body = {
        "since": format_time(since),
        "until": format_time(until),
        "by": by.value,
        "rows": [
            {"tenant": r.tenant, "namespace": r.namespace, "pod": r.pod,
             "gibHours": round(r.gib_hours, ROUND), "gpuHours": round(r.gpu_hours, ROUND),
             "leases": r.leases}
            for r in rows
        ],
    }  # fmt: skip
    return json.dumps(body, indent=2) + "\n"


def run(args: argparse.Namespace) -> int:
    now = time.time()
    try:
        until = read_when(args.until, now, "--until") if args.until else now
        since = read_when(args.since, now, "--since") if args.since else 0.0
        if since >= until:
            raise InvalidPeriod(
                f"--since ({format_time(since)}) must be before --until ({format_time(until)})"
            )
        if args.from_file is not None:
            objects = leases_listed(leases_from_file(args.from_file))
        else:
            objects = asyncio.run(_live_leases(args.kubeconfig))
    except GpupoolError as err:
        print(f"gpupool usage: error: {err}", file=sys.stderr)
        return 2
    by = UsageBy(args.by)
    rows = report(objects, since, until, by, min(now, until))
    if args.output == "csv":
        text = as_csv(rows)
    elif args.output == "json":
        text = as_json(rows, since, until, by)
    else:
        text = as_table(rows, by)
    print(text, end="")
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "usage",
        help="GiB-hours and GPU-hours per tenant, namespace or pod over a period (a bill)",
        description=(
            "Sums what each GpuLease held over [--since, --until): GiB-hours (its device memory "
            "x hours) and GPU-hours (its card-equivalents x hours), per tenant, namespace or "
            "pod, from the live cluster (--kubeconfig) or a file of GpuLeases (--from-file)."
        ),
    )
    parser.add_argument(
        "--kubeconfig", type=Path, default=None, help="default: $KUBECONFIG, ~/.kube/config"
    )
    parser.add_argument(
        "--from-file",
        type=Path,
        metavar="FILE",
        help="GpuLeases from this file (kubectl get gpuleases -A -o json, a JSON array, or one "
        "a line) instead of the cluster",
    )
    parser.add_argument(
        "--since", help="start: RFC 3339, or a span before now (24h, 30d); default: all"
    )
    parser.add_argument("--until", help="end: RFC 3339, or a span before now; default: now")
    parser.add_argument(
        "--by", choices=[b.value for b in UsageBy], default="tenant", help="default: tenant"
    )
    parser.add_argument(
        "-o", "--output", choices=("table", "csv", "json"), default="table", help="default: table"
    )
    parser.set_defaults(func=run)
