"""gpupool's Kubernetes adapter: the CRDs, typed conversions between objects and domain values,
and the lightkube glue. Conversions are pure functions over decoded JSON (one noun per module);
only `crds`, `lease_source`, `reporter`, `leader` and `fast_post` talk to the API server.

The names gpupool writes on objects (API group, annotations, labels, resources) live in
`gpupool.adapters.wire.names`, and only there.
"""
