"""The lease lifecycle: GpuLeases through the core's phases (plan), and the writes (reconcile)."""
