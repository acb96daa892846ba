"""Reclaim for room in the replay: the placement what-if behind `plan_site_reclaim`.

The what-if itself (`room_bound`, `fits_without`, `UsableNodes`) lives in `placement.whatif` and
`room_plan` in `state.room_reclaim`, so the live reclaim controller asks exactly the same questions;
this module keeps the replay's names for them. `HELD` is the node condition the replay sets on a
node whose room is held for a claimant.
"""

from __future__ import annotations

from gpupool.placement.whatif import UsableNodes, fits_without, room_bound
from gpupool.state.room_reclaim import room_plan

__all__ = ["HELD", "UsableNodes", "fits_without", "room_bound", "room_plan"]

HELD = "held for a reclaim"
