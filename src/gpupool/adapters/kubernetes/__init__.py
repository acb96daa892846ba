"""gpupool's Kubernetes adapter: the CRDs, typed conversions between objects and domain values,
and the lightkube client glue. Conversions are pure functions over decoded JSON (one noun per
module); only `crds`, `lease_source`, `reporter`, `leader` and `fast_post` talk to the API server.

The names gpupool writes on objects live in `gpupool.adapters.wire.names`, not here; the few below
are that module's, re-exported only for `lease.py` and `node.py` until they move to `state/`.
"""

from gpupool.adapters.wire.names import (
    API_VERSION,
    LABEL_GPU_COUNT,
    LABEL_GPU_MEMORY,
    LABEL_GPU_MODEL,
    LABEL_NODE,
    LABEL_TENANT,
)

__all__ = [
    "API_VERSION",
    "LABEL_GPU_COUNT",
    "LABEL_GPU_MEMORY",
    "LABEL_GPU_MODEL",
    "LABEL_NODE",
    "LABEL_TENANT",
]
