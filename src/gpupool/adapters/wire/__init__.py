"""Pure converters between gpupool's Kubernetes objects and the core's values.

No I/O: pod JSON to a domain `Request`, GpuQuota objects to `TenantQuota`, GpuLease objects to
quota `Lease`, Kubernetes quantities to integers, and the names of every label, annotation,
resource and gate gpupool reads or writes (DESIGN.md section 3). The webhook and the controller
share them, so both read a pod the same way.
"""
