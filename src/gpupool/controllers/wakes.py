"""What kind of change a watched change is for the loops' wake-ups: the watch cache's kind, or a
narrower one when the change moves only what no loop's decision needs at once.

- a Node whose labels and label-described cards stayed the same (its readiness, taints,
  cordon or addresses moved: kwok's nodes flap Ready/Unknown on a loaded machine, and a real
  node's conditions move by themselves) is a `node-state` change: admission charges by the
  cards, not by readiness; the cards' conditions reach /metrics and reclaim with the next round
  (while pods queue that is within 5 s);
- a GpuQuota whose metadata (generation, labels, annotations) stayed the same is a
  `gpuquota-status` change: the status is the controller's own writing, read back by no
  decision;
- a GpuPool whose metadata and spec stayed the same is a `gpupool-status` change: the
  controller's own status writes (its fragmentation and defragmentation rounds); only the
  defragmentation loop, which reads its last round from there, wakes on it (the metrics+pools
  loop that writes the rest would otherwise wake itself every few seconds).

Everything else keeps its kind. Nothing here decides; it only keeps a loop from running a whole
round for a change it would decide nothing new from.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpupool.adapters.kubernetes.decoded import read_node
from gpupool.state.objects import Change

NODE_STATE = "node-state"
QUOTA_STATUS = "gpuquota-status"
POOL_STATUS = "gpupool-status"
_QUOTA_META = ("generation", "labels", "annotations", "deletionTimestamp")


def _node_cards(obj: Mapping[str, Any]) -> object:
    try:
        node = read_node(obj)
    except Exception:  # unreadable: a change like any other (the loop sets the object aside)
        return object()
    return (node.labels, node.label_gpus, node.problem)


def _meta(obj: Mapping[str, Any]) -> tuple[object, ...]:
    meta = obj.get("metadata") or {}
    if not isinstance(meta, Mapping):
        return (object(),)
    return tuple(meta.get(k) for k in _QUOTA_META)


def wake_kind(change: Change) -> str:
    """The kind the loops hear this change as."""
    old, new = change.old, change.new
    if old is None or new is None:
        return change.kind  # made or deleted
    if change.kind == "nodes" and _node_cards(old) == _node_cards(new):
        return NODE_STATE
    if (
        change.kind == "gpuquotas"
        and _meta(old) == _meta(new)
        and old.get("spec") == new.get("spec")
    ):
        return QUOTA_STATUS
    if (
        change.kind == "gpupools"
        and _meta(old) == _meta(new)
        and old.get("spec") == new.get("spec")
    ):
        return POOL_STATUS
    return change.kind
