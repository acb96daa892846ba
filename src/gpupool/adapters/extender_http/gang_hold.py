"""The rooms held for gangs' unplaced members, in the leader extender's memory (`gang_bind`
says what a hold is and when it ends); times are the bind context's monotonic seconds. The
Binder owns them (not the bind context): only the gang steps reach them."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpupool.adapters.extender_http.held import Held
from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod

GANG_HOLD_S = 120.0  # how long the room of a gang's unplaced members is held


@dataclass(slots=True)
class GangHold:
    gang: str  # namespace/name
    until: float  # the bind context's monotonic seconds
    members: dict[str, tuple[ScheduledPod, Held]] = field(default_factory=dict)  # uid ->


class GangHolds:
    """The standing holds, by gang; each member's held lease, by uid."""

    def __init__(self) -> None:
        self._by_gang: dict[str, GangHold] = {}

    def __len__(self) -> int:
        return sum(len(h.members) for h in self._by_gang.values())

    def standing(self, gang: str) -> GangHold | None:
        return self._by_gang.get(gang)

    def node_for(self, pod: ScheduledPod) -> str | None:
        """The node whose room is held for `pod`, if any."""
        if pod.gang is None:
            return None
        held = self._by_gang.get(pod.gang.key)
        entry = None if held is None else held.members.get(pod.uid)
        return None if entry is None else entry[1].lease.node

    def add(self, gang: str, until: float) -> GangHold:
        """A new hold (the caller asked `standing` first: one hold per gang)."""
        if gang in self._by_gang:
            raise ValueError(f"gang {gang} has a hold already")
        hold_ = self._by_gang[gang] = GangHold(gang, until)
        return hold_

    def discard_empty(self, gang: str) -> None:
        held = self._by_gang.get(gang)
        if held is not None and not held.members:
            del self._by_gang[gang]

    def take(self, pod: ScheduledPod) -> Held | None:
        """Remove and return the pod's own held room."""
        if pod.gang is None:
            return None
        held = self._by_gang.get(pod.gang.key)
        if held is None:
            return None
        entry = held.members.pop(pod.uid, None)
        if not held.members:
            del self._by_gang[pod.gang.key]
        return None if entry is None else entry[1]

    def expired(self, now: float) -> list[tuple[str, ScheduledPod, Held]]:
        """Remove and return every held room past its time."""
        out: list[tuple[str, ScheduledPod, Held]] = []
        for gang, held in list(self._by_gang.items()):
            if held.until <= now:
                out.extend((gang, pod, h) for pod, h in held.members.values())
                del self._by_gang[gang]
        return out

    def all_held(self) -> list[Held]:
        return [h for held in self._by_gang.values() for _, h in held.members.values()]
