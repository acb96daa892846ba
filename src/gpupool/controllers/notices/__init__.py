"""Notice, grace period, eviction, withdrawal: the plan noun (plan) and its one writer (write)
that reclaim, lease expiry, budget drain and defragmentation share."""
