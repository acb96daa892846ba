"""The readers the controller's loops, the web view and the extender use, each remembering what
it decoded by object uid and resourceVersion: a round over the watch cache decodes only the
objects that changed since the last one, and the extender decodes a pod version once whether
kube-scheduler sends it to filter and prioritize, bind fetches it or a gang lists it (an object
with the same uid and version is the same bytes; the decoded values are frozen). Objects without
both (hand-made ones in tests) are decoded each time.

A reader that raises remembers nothing: the same bad object fails again, as it must (the loops'
containment counts and retries it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from gpupool.adapters.kubernetes import lease, node, pod_view
from gpupool.adapters.wire import quotas

T = TypeVar("T")

MAX_KEPT = 50_000  # per reader: 5,000 nodes and tens of thousands of pods and leases


def by_version(read: Callable[[Mapping[str, Any]], T]) -> Callable[[Mapping[str, Any]], T]:
    kept: dict[tuple[str, str], T] = {}

    def remembered(obj: Mapping[str, Any]) -> T:
        meta = obj.get("metadata")
        uid = meta.get("uid") if isinstance(meta, Mapping) else None
        version = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
        if not uid or not version:
            return read(obj)
        key = (str(uid), str(version))
        hit = kept.get(key)
        if hit is not None:
            return hit
        value = read(obj)
        if len(kept) >= MAX_KEPT:  # old versions pile up: start afresh rather than grow
            kept.clear()
        kept[key] = value
        return value

    remembered.__doc__ = read.__doc__
    remembered.__name__ = getattr(read, "__name__", "read")
    return remembered


read_pod = by_version(pod_view.read_pod)
read_node = by_version(node.read_node)
read_gpu_node = by_version(node.read_gpu_node)
lease_from_json = by_version(lease.lease_from_json)
read_quota = by_version(quotas.read_quota)
