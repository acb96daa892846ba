"""The cluster's controllers, one package per noun: `admission` (the quota gate), `leases` (the
GpuLease lifecycle), `node_health` (GpuNode heartbeats) and `reclaim` (borrowed quota and room).
Each has a pure `plan` over typed `gpupool.state` values and a `reconcile` that reads the API
server through `ports.ClusterApi`, decodes once, plans and writes. `manager` runs the rounds."""
