"""Reclaim of borrowed quota and of room (plan, room), and the writes (reconcile)."""
