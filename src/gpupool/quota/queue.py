"""The admission queue: pods waiting for quota, per tenant, in priority then submit-time order.

`drain(attempt)` offers waiting pods to `attempt` (which decides quota and, in the simulator or
controller, placement) tenant by tenant (higher tenant priority first, then name):
- STRICT FIFO: a tenant's head that cannot be admitted holds back everything behind it
  (the rest wait with reason QUEUE_ORDER);
- BEST_EFFORT FIFO: a head that cannot be admitted is skipped and smaller pods behind it may go,
  so one large pod never blocks the small ones indefinitely.
An entry not ready to be admitted at all (a gang still missing members) holds back nothing, in
either mode. Each waiting entry knows its position (1 = next in its tenant's queue) and why it
waits.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum

from gpupool.quota.admission import WaitReason


class FifoMode(Enum):
    STRICT = "strict"
    BEST_EFFORT = "best-effort"


@dataclass(frozen=True, slots=True)
class QueueEntry:
    id: str
    tenant: str
    priority: int
    submitted_at: float
    amount: int = 0


@dataclass(frozen=True, slots=True)
class Waiting:
    """Where an entry stands: its place in its tenant's queue and why it is not admitted."""

    entry: QueueEntry
    position: int
    reason: WaitReason | None
    detail: str


@dataclass(frozen=True, slots=True)
class Outcome:
    admitted: bool
    reason: WaitReason | None = None
    detail: str = ""
    stop: bool = False  # True: nothing else can be admitted now, end the drain
    # False: the entry is not ready to be admitted at all (a gang still missing members), so
    # even strict FIFO lets the entries behind it go
    holds_line: bool = True


_Key = tuple[int, float, int, str]


class AdmissionQueue:
    def __init__(
        self,
        mode: FifoMode = FifoMode.BEST_EFFORT,
        tenant_priority: Mapping[str, int] | None = None,
    ) -> None:
        self.mode = mode
        self._tenant_priority = dict(tenant_priority or {})
        self._lines: dict[str, list[_Key]] = {}
        self._entries: dict[str, tuple[QueueEntry, _Key]] = {}
        self._why: dict[str, tuple[WaitReason | None, str]] = {}
        self._seq = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._entries

    def push(self, entry: QueueEntry, reason: WaitReason | None = None, detail: str = "") -> None:
        if entry.id in self._entries:
            raise ValueError(f"{entry.id} is already queued")
        self._seq += 1
        key: _Key = (-entry.priority, entry.submitted_at, self._seq, entry.id)
        bisect.insort(self._lines.setdefault(entry.tenant, []), key)
        self._entries[entry.id] = (entry, key)
        self._why[entry.id] = (reason, detail)

    def remove(self, entry_id: str) -> QueueEntry:
        entry, key = self._entries.pop(entry_id)
        line = self._lines[entry.tenant]
        del line[bisect.bisect_left(line, key)]
        if not line:
            del self._lines[entry.tenant]
        self._why.pop(entry_id, None)
        return entry

    def tenants(self) -> list[str]:
        return sorted(self._lines, key=lambda t: (-self._tenant_priority.get(t, 0), t))

    def entries(self, tenant: str) -> Iterator[QueueEntry]:
        for key in list(self._lines.get(tenant, ())):
            yield self._entries[key[3]][0]

    def position(self, entry_id: str) -> int:
        entry, key = self._entries[entry_id]
        return bisect.bisect_left(self._lines[entry.tenant], key) + 1

    def status(self, entry_id: str) -> Waiting:
        entry, _ = self._entries[entry_id]
        reason, detail = self._why[entry_id]
        return Waiting(entry, self.position(entry_id), reason, detail)

    def mark(self, entry_id: str, reason: WaitReason | None, detail: str = "") -> None:
        self._why[entry_id] = (reason, detail)

    def drain(self, attempt: Callable[[QueueEntry], Outcome]) -> list[QueueEntry]:
        """Offer waiting entries to `attempt` in order; remove and return the admitted ones."""
        admitted: list[QueueEntry] = []
        for tenant in self.tenants():
            blocked_by: QueueEntry | None = None
            for entry in self.entries(tenant):
                if blocked_by is not None:
                    self.mark(
                        entry.id,
                        WaitReason.QUEUE_ORDER,
                        f"behind {blocked_by.id} in tenant {tenant!r}'s queue (strict FIFO)",
                    )
                    continue
                outcome = attempt(entry)
                if outcome.admitted:
                    self.remove(entry.id)
                    admitted.append(entry)
                    continue
                self.mark(entry.id, outcome.reason, outcome.detail)
                if outcome.stop:
                    return admitted
                if self.mode is FifoMode.STRICT and outcome.holds_line:
                    blocked_by = entry
        return admitted
