"""The replay's holds on room being freed for waiting pods (reclaim for room): which node is
held for which pod and by which noticed leases, and the request shapes no room reclaim can serve
now. The replay's reclaim steps (`replay_reclaim`) decide when to plan one
(`state.room_reclaim.room_plan`, the live controller's code) and admission
(`replay_admission.serve_holds`) when a pod is served; this is the bookkeeping, on the engine's
snapshot: a held node carries the condition `HELD`, so no other pod is placed there."""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass, field

from gpupool.domain.requests import Request
from gpupool.placement.snapshot import ClusterSnapshot, Decision
from gpupool.quota.reclaim import Notice
from gpupool.simulator.replay_placement import Shape
from gpupool.simulator.replay_reclaim import HELD, room_bound


@dataclass(frozen=True, slots=True)
class Hold:
    """Room on `node` being freed for one waiting pod by the noticed leases `notices`."""

    node: int
    notices: tuple[str, ...]


@dataclass(slots=True)
class RoomHolds:
    holds: dict[str, Hold] = field(default_factory=dict)  # job id -> room freed for it
    victims: set[str] = field(default_factory=set)  # noticed leases whose room is held
    no_room: dict[Shape, Request] = field(default_factory=dict)  # no room reclaim serves these

    def __contains__(self, job_id: str) -> bool:
        return job_id in self.holds

    def nodes(self) -> set[int]:
        return {h.node for h in self.holds.values()}

    def hold(self, snap: ClusterSnapshot, job_id: str, node: int, notices: Iterable[str]) -> None:
        """Hold `node` for `job_id` while the leases `notices` are evicted."""
        hold = Hold(node, tuple(notices))
        self.holds[job_id] = hold
        self.victims.update(hold.notices)
        snap.set_condition(snap.names[node], HELD)

    def drop(
        self, snap: ClusterSnapshot, job_id: str, pending: MutableMapping[str, Notice] | None
    ) -> int:
        """End `job_id`'s hold and reopen its node (returned); with `pending` (the notices not
        yet carried out), withdraw its notices from it. Room may be found for any shape now."""
        hold = self.holds.pop(job_id)
        if pending is not None:
            for lease_id in hold.notices:
                if pending.pop(lease_id, None) is not None:
                    self.victims.discard(lease_id)
        snap.set_condition(snap.names[hold.node], None)
        self.no_room.clear()
        return hold.node

    def ready(self, pending: Iterable[str]) -> list[str]:
        """The pods whose noticed leases are all gone (none of them still in `pending`)."""
        left = set(pending)
        return [j for j, h in self.holds.items() if not any(n in left for n in h.notices)]

    def evicted(self, lease_id: str) -> bool:
        """A noticed lease was evicted: whether it was one a hold waited for."""
        if lease_id not in self.victims:
            return False
        self.victims.discard(lease_id)
        return True

    def reopen(self, snap: ClusterSnapshot, node: int, gone: list[Decision]) -> None:
        """Forget "no room" for the shapes that room freed on `node` (`gone`: what reclaim
        could evict there) might now serve."""
        for shape, req in list(self.no_room.items()):
            if room_bound(snap, node, req, gone):
                del self.no_room[shape]
