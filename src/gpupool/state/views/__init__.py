"""What people see of the pool, as pure values: the pool map (`pool`), the tenants' quota use
(`tenants`), the admission queue (`queue`) and the leases (`leases`), built from the same
`ClusterCache` the extender places on and the records the controller writes (GpuQuota status, pod
annotations); nothing here computes a decision again. Time is passed in; no I/O.

The terminal views (`gpupool status`, `queue`, `leases`) render these values; their JSON shape is
the values' fields (docs/views.md).
"""
