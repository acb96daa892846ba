"""`-o json` and the web view's API: the view values as JSON, one stable shape (docs/views.md):
every dataclass field in camelCase, amounts in bytes (or milli-GPU for a `gpu` quota), times in
epoch seconds, fractions in 0..1, plus `apiVersion` and `kind` at the top. Fields are added,
never renamed or removed, within `views.gpupool.io/v1`."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from gpupool.adapters.wire.names import VIEWS_API_VERSION
from gpupool.state.views.pool import NodeView
from gpupool.state.views.status import StatusView

API_VERSION = VIEWS_API_VERSION


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.capitalize() for p in rest)


_KEYS: dict[type, tuple[tuple[str, str], ...]] = {}  # per dataclass: (field, JSON key)


def _keys(cls: type) -> tuple[tuple[str, str], ...]:
    keys = _KEYS.get(cls)
    if keys is None:
        keys = _KEYS[cls] = tuple((f.name, _camel(f.name)) for f in dataclasses.fields(cls))
    return keys


# The plain form of each node's view, by the view object: the web view keeps a node's
# `NodeView` between renders while the node is unchanged (state.views.live), so a new document
# re-uses its part of the last one, and the live stream's diff passes it by identity. The views
# are frozen; the plain values are shared, and must not be modified by their readers. The
# entries hold their views, so an id is not re-used while it is kept.
_NODES: dict[int, tuple[NodeView, dict[str, Any]]] = {}
MAX_NODES_KEPT = 50_000  # then start afresh (a tenant's views are new objects on each render)


_KEPT: dict[int, dict[str, Any]] = {}  # the same plain values, by their own id
_TEXT: dict[int, bytes] = {}  # their compact JSON, by the plain value's id, once asked for


def _node(value: NodeView) -> dict[str, Any]:
    hit = _NODES.get(id(value))
    if hit is not None and hit[0] is value:
        return hit[1]
    out = {key: plain(getattr(value, name)) for name, key in _keys(NodeView)}
    if len(_NODES) >= MAX_NODES_KEPT:
        _NODES.clear()
        _KEPT.clear()
        _TEXT.clear()
    _NODES[id(value)] = (value, out)
    _KEPT[id(out)] = out
    return out


def kept_text(value: object) -> bytes | None:
    """The compact JSON (`separators=(",", ":")`) of `value` when it is a node's kept plain
    value (made once, then re-used by every document holding it); None for anything else."""
    if _KEPT.get(id(value)) is not value:
        return None
    text = _TEXT.get(id(value))
    if text is None:
        text = _TEXT[id(value)] = json.dumps(value, separators=(",", ":")).encode()
    return text


def plain(value: Any) -> Any:
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if type(value) is NodeView:
        return _node(value)
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {key: plain(getattr(value, name)) for name, key in _keys(type(value))}
    return value


def document(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": kind, **body}


def dump(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2) + "\n"


def status_doc(view: StatusView, node: str | None, tenant: str | None) -> dict[str, Any]:
    pool = view.pool
    nodes = [n for n in pool.nodes if node is None or n.name == node]
    if tenant is not None:
        nodes = [n for n in nodes if any(s.tenant == tenant for c in n.cards for s in c.slices)]
    tenants = [t for t in view.tenants if tenant is None or t.name == tenant]
    return document(
        "PoolStatus",
        {
            "now": view.now,
            "namespaces": plain(view.namespaces),
            "notes": list(view.notes),
            "totals": plain(pool.totals),
            "tenants": plain(tenants),
            "nodes": plain(nodes),
            "unplaced": plain(pool.unplaced),
            "queued": sum(1 for q in view.queue if tenant is None or q.tenant == tenant),
        },
    )


def queue_doc(view: StatusView, tenant: str | None) -> dict[str, Any]:
    items = [q for q in view.queue if tenant is None or q.tenant == tenant]
    return document("Queue", {"now": view.now, "notes": list(view.notes), "items": plain(items)})


def leases_doc(view: StatusView, tenant: str | None) -> dict[str, Any]:
    def mine(xs: Any) -> Any:
        return plain([x for x in xs if tenant is None or x.tenant == tenant])

    return document(
        "Leases",
        {
            "now": view.now,
            "notes": list(view.notes),
            "recentSeconds": view.leases.recent_s,
            "live": mine(view.leases.live),
            "recent": mine(view.leases.recent),
        },
    )


def status_json(view: StatusView, node: str | None, tenant: str | None) -> str:
    return dump(status_doc(view, node, tenant))


def queue_json(view: StatusView, tenant: str | None) -> str:
    return dump(queue_doc(view, tenant))


def leases_json(view: StatusView, tenant: str | None) -> str:
    return dump(leases_doc(view, tenant))
