"""Node health from GpuNode heartbeats (plan), and the writes (reconcile)."""
