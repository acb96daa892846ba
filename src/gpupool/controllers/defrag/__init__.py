"""Live defragmentation: a pure round plan over the snapshot (plan) and its writes (reconcile)."""
