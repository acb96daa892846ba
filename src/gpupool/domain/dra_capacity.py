"""What a claim consumes of a gpupool DRA device's `memory` capacity (pure): one rule for the node's
driver that publishes the capacity (`node/dra/slices.py`), the controller's allocator that writes
each claim's consumption (`controllers/dra/plan.py`) and the simulator that models the DRA path
(`simulator/dra_claims.py`).

The capacity comes in steps of MEMORY_STEP (the requestPolicy's `validRange.step`):
- a card publishes what slices may take, down to a whole step (the API wants the range's maximum
  a whole number of steps);
- a claim's asked bytes are rounded UP to a whole step when the claim is read, as kube-scheduler
  rounds a request up to the policy's next valid value: the planner then places exactly what will
  be consumed, and the task never gets less than it asked;
- a placed slice consumes its bytes down to a whole step. For an asked size this changes nothing
  (already whole steps); for a share of a card (the simulator's openb tasks) it is the extender
  path's floor(card x share) taken down at most 1 MiB more, so shares that fill a card together
  on the extender path fill it together here too, and the DRA path places as the extender does.
"""

from __future__ import annotations

from gpupool.domain.units import MiB

MEMORY_STEP = MiB


def publishable_memory(limit_bytes: int) -> int:
    """A card's `memory` capacity: what slices may take there, down to a whole step."""
    return limit_bytes // MEMORY_STEP * MEMORY_STEP


def asked_memory(asked_bytes: int) -> int:
    """A claim's asked bytes as placed and consumed: up to a whole step."""
    return -(-asked_bytes // MEMORY_STEP) * MEMORY_STEP


def consumed_memory(slice_bytes: int) -> int:
    """What a placed slice of `slice_bytes` consumes of its card: down to a whole step."""
    return slice_bytes // MEMORY_STEP * MEMORY_STEP
