"""The terminal views as text, at most 80 columns wide whatever the pool's size: the summary comes
first and long lists are cut (with how many were left out and how to zoom). Pure functions of the
view values, so golden tests pin them."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from gpupool.domain.units import format_bytes
from gpupool.state.views.leases import LeasesView, LeaseView
from gpupool.state.views.pool import CardView, NodeView
from gpupool.state.views.queue import QueueItem
from gpupool.state.views.status import StatusView
from gpupool.state.views.tenants import TenantView

WIDTH = 80
TOP_NODES = 10
MAP_WIDTH = 40
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _table(
    header: Sequence[str], rows: Sequence[Sequence[str]], widths: Sequence[int], left: int = 1
) -> list[str]:
    """The first `left` columns (names) left-aligned, the rest (figures) right-aligned; cells
    cut to their width, so a line is never wider than the widths add up to."""
    out = []
    for row in (header, *rows):
        cells = [_cut(str(c), w) for c, w in zip(row, widths, strict=True)]
        aligned = [
            c.ljust(w) if i < left else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        out.append(" ".join(aligned).rstrip())
    return out


def _bytes(value: int | None) -> str:
    return "-" if value is None else (format_bytes(value) if value else "0")


def _pct(fraction: float | None) -> str:
    return "-" if fraction is None else f"{100 * fraction:.1f}%"


def _age(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m" if s % 3600 else f"{s // 3600}h"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h" if s % 86400 else f"{s // 86400}d"


def _amount(tenant: TenantView, value: int | None) -> str:
    if value is None:
        return "-"
    if tenant.resource == "gpu":
        return f"{value / 1000:g}"
    return _bytes(value)


def _scope(view: StatusView) -> list[str]:
    lines = [f"note: {n}" for n in view.notes]
    return [w for line in lines for w in textwrap.wrap(line, WIDTH, subsequent_indent="  ")]


# ---- gpupool status ---------------------------------------------------------------------------
def render_status(view: StatusView) -> str:
    t = view.pool.totals
    lines: list[str] = []
    if t.nodes:
        health = ", ".join(f"{n} {h}" for h, n in t.by_health)
        models = ", ".join(t.models)
        used = t.used_bytes / t.memory_bytes if t.memory_bytes else 0.0
        lines += [
            f"POOL  {t.nodes} nodes, {t.cards} cards ({_cut(models, 40)})",
            f"  memory {_bytes(t.memory_bytes)}: used {_bytes(t.used_bytes)} ({_pct(used)}), "
            f"free {_bytes(t.free_bytes)}, fragmentation {_pct(t.fragmentation)}",
            f"  {t.slices} slices; nodes: {health}"
            + (f"; {t.unschedulable} skipped by placement" if t.unschedulable else ""),
        ]
    else:
        lines.append("POOL  no GPU nodes visible")
    lines += _scope(view)
    lines += ["", *_tenant_table(view.tenants)]
    lines += _budgets(view.tenants)
    waiting = sum(1 for q in view.queue if q.stage == "quota")
    scheduling = len(view.queue) - waiting
    lines += [
        "",
        f"QUEUE  {waiting} at the quota gate, {scheduling} admitted without a card yet"
        + ("  (gpupool queue)" if view.queue else ""),
        f"LEASES  {len(view.leases.live)} live, {len(view.leases.recent)} ended in the last "
        f"{_age(view.leases.recent_s)}; {view.leases.gib_hours:.1f} GiB-hours (gpupool leases)",
    ]
    if view.pool.nodes:
        lines += ["", *_node_table(view.pool.nodes)]
    for u in view.pool.unplaced[:5] if view.pool.nodes else ():
        lines.append(_cut(f"! lease {u.lease} on {u.node} is on no card: {u.why}", WIDTH))
    return "\n".join(lines) + "\n"


def _tenant_table(tenants: Sequence[TenantView], limit: int = 20) -> list[str]:
    if not tenants:
        return ["TENANTS  none"]
    rows = [
        (
            t.name,
            _amount(t, t.used),
            _amount(t, t.nominal),
            _pct(t.use_fraction),
            _amount(t, t.borrowed),
            _amount(t, t.lent),
            str(t.live_leases),
            str(t.queued),
            f"{t.gib_hours:.1f}",
        )
        for t in tenants[:limit]
    ]
    header = ("TENANT", "USED", "NOMINAL", "USE", "BORROWED", "LENT", "LEASES", "QUEUED", "GiB-h")
    lines = _table(header, rows, (16, 7, 7, 6, 8, 7, 6, 6, 8))
    if len(tenants) > limit:
        lines.append(f"... and {len(tenants) - limit} more tenants (--tenant NAME)")
    return lines


def _budgets(tenants: Sequence[TenantView]) -> list[str]:
    lines = []
    for t in tenants:
        if t.budget_hours is None or t.budget_window_s is None:
            continue
        unit = "GPU-hours" if t.resource == "gpu" else "GiB-hours"
        used = "?" if t.hours_used is None else f"{t.hours_used:.1f}"
        share = (
            f" ({_pct(t.hours_used / t.budget_hours)})"
            if t.hours_used is not None and t.budget_hours
            else ""
        )
        lines.append(
            _cut(
                f"  budget {t.name}: {used} of {t.budget_hours:g} {unit} this "
                f"{_age(t.budget_window_s)} window{share}",
                WIDTH,
            )
        )
    return lines


def _node_table(nodes: Sequence[NodeView], limit: int = TOP_NODES) -> list[str]:
    def load(n: NodeView) -> float:
        return n.used_bytes / n.memory_bytes if n.memory_bytes else 0.0

    trouble = [n for n in nodes if n.condition is not None or n.health != "Healthy"]
    busy = sorted(nodes, key=lambda n: (-load(n), n.name))
    shown = (
        trouble[:limit]
        + [n for n in busy if n not in trouble[:limit]][: max(0, limit - len(trouble[:limit]))]
    )
    rows = [
        (
            n.name,
            n.health,
            str(len(n.cards)),
            str(n.slices),
            _bytes(n.used_bytes),
            _bytes(n.memory_bytes),
            _pct(load(n)),
            _pct(n.fragmentation),
        )
        for n in shown
    ]
    title = "NODES (unhealthy first, then busiest; --node NAME for its cards)"
    header = ("NODE", "HEALTH", "CARDS", "SLICES", "USED", "MEMORY", "USE", "FRAG")
    lines = [title, *_table(header, rows, (24, 8, 5, 6, 7, 7, 6, 6), left=2)]
    if len(nodes) > len(shown):
        lines.append(f"... and {len(nodes) - len(shown)} more nodes (-o json lists all)")
    for n in trouble[:limit]:
        if n.condition:
            lines.append(_cut(f"  {n.name}: {n.condition}", WIDTH))
    return lines


# ---- gpupool status --node --------------------------------------------------------------------
def _card_map(card: CardView, letters: dict[str, str]) -> str:
    cells = ["."] * MAP_WIDTH
    total = max(card.memory_bytes, 1)
    for s in card.slices:
        lo = min(MAP_WIDTH - 1, s.offset_bytes * MAP_WIDTH // total)
        hi = max(lo + 1, min(MAP_WIDTH, -(-(s.offset_bytes + s.size_bytes) * MAP_WIDTH // total)))
        for i in range(lo, hi):
            cells[i] = letters[s.lease]
    return "|" + "".join(cells) + "|"


def render_node(view: StatusView, name: str) -> str:
    node = view.pool.node(name)
    assert node is not None  # checked by StatusView.check_node
    lines = [
        _cut(f"NODE  {node.name}  {node.health}, {len(node.cards)} cards", WIDTH),
        f"  used {_bytes(node.used_bytes)} of {_bytes(node.memory_bytes)}, fragmentation "
        f"{_pct(node.fragmentation)}",
    ]
    if node.condition:
        lines.append(_cut(f"  placement skips it: {node.condition}", WIDTH))
    lines.append("")
    header = f"{'GPU':>3} {'MODEL':<10} {'FREE':>7} {'FRAG':>6}  MAP (each cell 1/{MAP_WIDTH} card)"
    lines.append(header)
    letters: dict[str, str] = {}
    for card in node.cards:
        for s in card.slices:
            letters.setdefault(s.lease, LETTERS[len(letters) % len(LETTERS)])
        mark = "" if card.healthy else " unhealthy"
        lines.append(
            f"{card.index:>3} {_cut(card.model, 10):<10} {_bytes(card.free_bytes):>7} "
            f"{_pct(card.fragmentation):>6}  {_card_map(card, letters)}{mark}"
        )
        for s in card.slices:
            flags = " borrowed" if s.borrowed else ""
            text = (
                f"      {letters[s.lease]} {_bytes(s.size_bytes):>6} {s.tenant:<14} {s.pod}"
                f"  {s.phase}{flags}"
            )
            lines.append(_cut(text, WIDTH))
    return "\n".join(lines) + "\n"


# ---- gpupool status --tenant ------------------------------------------------------------------
def render_tenant(view: StatusView, name: str) -> str:
    tenant = next(t for t in view.tenants if t.name == name)
    lines = [f"TENANT  {tenant.name}" + (f"  (cohort {tenant.cohort})" if tenant.cohort else "")]
    lines += _scope(view)
    lines.append(
        f"  used {_amount(tenant, tenant.used)} of nominal {_amount(tenant, tenant.nominal)} "
        f"({_pct(tenant.use_fraction)}); guaranteed {_amount(tenant, tenant.guaranteed)}; "
        f"borrowed {_amount(tenant, tenant.borrowed)}; lent {_amount(tenant, tenant.lent)}"
    )
    lines += _budgets([tenant])
    leases = LeasesView(
        tuple(x for x in view.leases.live if x.tenant == name),
        tuple(x for x in view.leases.recent if x.tenant == name),
        view.leases.recent_s,
    )
    queue = [q for q in view.queue if q.tenant == name]
    lines += ["", *_queue_lines(queue)]
    lines += ["", *_lease_lines(leases)]
    return "\n".join(lines) + "\n"


# ---- gpupool queue ----------------------------------------------------------------------------
def _queue_lines(queue: Sequence[QueueItem]) -> list[str]:
    if not queue:
        return ["QUEUE  no pod waits"]
    lines = [f"QUEUE  {len(queue)} waiting (in each tenant's admission order)"]
    header = ("TENANT", "POSITION", "POD", "WAITED", "ASKS")
    widths = (14, 8, 34, 7, 10)
    rows = []
    for q in queue:
        where = f"{q.position}/{q.of}" if q.position is not None else "-"
        asks = f"{q.gpus}x{_bytes(q.memory_bytes)}" if q.memory_bytes else f"{q.gpus} GPU"
        rows.append((q.tenant, where, q.pod, _age(q.waited_s), asks))
    table = _table(header, rows, widths, left=3)
    lines.append(table[0])
    for line, q in zip(table[1:], queue, strict=True):
        lines.append(line)
        lines += textwrap.wrap(q.reason, WIDTH, initial_indent="    ", subsequent_indent="    ")
    return lines


def render_queue(view: StatusView, tenant: str | None = None) -> str:
    queue = [q for q in view.queue if tenant is None or q.tenant == tenant]
    return "\n".join([*_scope(view), *_queue_lines(queue)]) + "\n"


# ---- gpupool leases ---------------------------------------------------------------------------
def _lease_rows(leases: Sequence[LeaseView]) -> list[tuple[str, ...]]:
    return [
        (
            x.pod,
            x.tenant,
            x.node,
            ",".join(str(c) for c in x.cards),
            _bytes(x.memory_bytes),
            x.phase + ("*" if x.borrowed else ""),
            _age(x.held_s),
            f"{x.gib_hours:.2f}",
        )
        for x in leases
    ]


def _lease_lines(leases: LeasesView) -> list[str]:
    header = ("POD", "TENANT", "NODE", "GPU", "MEMORY", "PHASE", "HELD", "GiB-h")
    widths = (21, 10, 12, 3, 6, 8, 5, 6)
    lines = [f"LIVE LEASES  {len(leases.live)}  (* borrowed)"]
    if leases.live:
        lines += _table(header, _lease_rows(leases.live), widths, left=3)
    lines += ["", f"ENDED IN THE LAST {_age(leases.recent_s)}  {len(leases.recent)}"]
    if leases.recent:
        lines += _table(header, _lease_rows(leases.recent), widths, left=3)
    lines.append(f"GiB-hours in all: {leases.gib_hours:.2f}")
    return lines


def render_leases(view: StatusView, tenant: str | None = None) -> str:
    leases = view.leases
    if tenant is not None:
        leases = LeasesView(
            tuple(x for x in leases.live if x.tenant == tenant),
            tuple(x for x in leases.recent if x.tenant == tenant),
            leases.recent_s,
        )
    return "\n".join([*_scope(view), *_lease_lines(leases)]) + "\n"
