"""Which watched updates are only a heartbeat: they move a time and nothing a decision reads, so
they must not wake a loop (a Node's status heartbeat, written by its kubelet or kwok, would
otherwise make the controller's cost follow the cluster's size). gpupool's own agents renew a
Lease per node instead (`node_lease`), which no loop wakes on.

A heartbeat still reaches the cache (the node-health check reads the times when it runs); it only
does not count as a change worth a round. Everything not named here is a change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpupool.state.objects import Change

# metadata a write always moves (its version, its field managers' timestamps)
_META_NOISE = ("resourceVersion", "managedFields", "generation")


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {k: v for k, v in meta.items() if k not in _META_NOISE}


def _node_status(status: Mapping[str, Any]) -> dict[str, Any]:
    """A Node's status without its conditions' heartbeat times (the kubelet's or kwok's)."""
    out = {k: v for k, v in status.items() if k != "conditions"}
    out["conditions"] = [
        {k: v for k, v in c.items() if k != "lastHeartbeatTime"}
        for c in status.get("conditions") or ()
        if isinstance(c, Mapping)
    ]
    return out


_STATUS_NOISE = {"nodes": _node_status}


def only_heartbeat(change: Change) -> bool:
    """True when `change` moved nothing but heartbeat times and write bookkeeping."""
    old, new = change.old, change.new
    strip = _STATUS_NOISE.get(change.kind)
    if strip is None or old is None or new is None:
        return False
    if _meta(old) != _meta(new):
        return False
    if {k: v for k, v in old.items() if k not in ("metadata", "status")} != {
        k: v for k, v in new.items() if k not in ("metadata", "status")
    }:
        return False
    return strip(old.get("status") or {}) == strip(new.get("status") or {})
