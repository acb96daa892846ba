"""lightkube classes for gpupool's custom resources (generic resources: plain dicts on the wire)."""

from __future__ import annotations

from typing import Any

from lightkube.generic_resource import create_global_resource, create_namespaced_resource

from gpupool.adapters.wire.names import GROUP, VERSION

GpuLease: Any = create_namespaced_resource(GROUP, VERSION, "GpuLease", "gpuleases")
GpuNode: Any = create_global_resource(GROUP, VERSION, "GpuNode", "gpunodes")
GpuQuota: Any = create_global_resource(GROUP, VERSION, "GpuQuota", "gpuquotas")
GpuPool: Any = create_global_resource(GROUP, VERSION, "GpuPool", "gpupools")


def to_dict(obj: Any) -> dict[str, Any]:
    """Any lightkube object (typed model or generic resource) as plain JSON-ready dicts."""
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for key, value in obj.items():
            out[key] = to_dict(value) if hasattr(value, "to_dict") else value
        return out
    result: dict[str, Any] = obj.to_dict()
    return result
