"""What one bind has found so far, as kube-scheduler's CycleState: the step it is in, the pod
once decoded, the gang plan once checked, the reservation once made and whether the Binding
stood. The runner (bind.py) alone writes it; the steps are given their inputs, never the state.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gpupool.adapters.extender_http.gang_bind import GangPlan
from gpupool.adapters.extender_http.reserve import Reservation
from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod


class Step(StrEnum):
    """Bind's steps, in the order the runner takes them."""

    DECODE = "decode"  # the pod: filter's copy, else a fresh read; the uid kube-scheduler binds
    CHECK = "check"  # the pod and the node, before anything is held
    GANG = "gang"  # a gang member: do all its members fit? its own held room given back
    RESERVE = "reserve"  # the pod's lease on the node, held in memory
    WRITE = "write"  # the Binding (or, for a pod bound already, its annotations)
    LEASE = "lease"  # after the Binding: the GpuLease, created in the background
    HOLD_GANG = "hold_gang"  # after the Binding: the room of the gang's other members


@dataclass(slots=True)
class BindState:
    pod_ref: str  # namespace/name, as kube-scheduler named it
    node: str
    step: Step = Step.DECODE
    pod: ScheduledPod | None = None
    gang: GangPlan | None = None
    reservation: Reservation | None = None
    bound: bool = False  # the Binding stood: nothing is undone past here

    @property
    def to_undo(self) -> Reservation | None:
        """The reservation a failure must undo: one made, and no Binding standing on it."""
        return None if self.bound else self.reservation
