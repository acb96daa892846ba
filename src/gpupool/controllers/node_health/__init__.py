"""Node health from the agents' heartbeats, their node Leases (plan), and the writes (reconcile)."""
