"""Why the extender refuses a pod, as a value: a reason code a caller (and a test) can branch on,
and the message kube-scheduler shows the user. Returned, never raised: a refusal is an answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Why(StrEnum):
    BAD_REQUEST = "BadRequest"  # the pod's GPU request cannot be read (the message says why)
    NO_GPU = "NoGpu"  # the pod asks for no gpupool GPU
    REPLACED = "PodReplaced"  # the pod of that name has another uid now
    ALREADY_BOUND = "AlreadyBound"  # the pod is bound to another node
    LEASE_ELSEWHERE = "LeaseElsewhere"  # the pod holds an active lease on another node
    UNKNOWN_NODE = "UnknownNode"  # the node is not (or no longer) one the cache knows
    NO_LONGER_FITS = "NoLongerFits"  # the node's filter verdict changed since filter
    CHANGED = "NodeChanged"  # the leases just listed leave no room for the planned slices
    RETRIES = "Retries"  # every reservation round lost a race
    NOT_ADMITTED = "NotAdmitted"  # a tenant's pod without gpupool's admission record
    OVER_CHARGE = "OverCharge"  # the node's cards would hold more than admission counted
    NODE_EXCLUDED = "NodeExcluded"  # the pod's own spec excludes the node (selector, taints)
    GANG_NO_ROOM = "GangNoRoom"  # the pod's gang does not all fit now
    GANG_NEVER_FITS = "GangNeverFits"  # the pod's gang does not fit the cluster even empty
    GANG_HELD = "GangHeld"  # the pod's room is held on another node
    # bind only: the extender could not judge or could not write
    BUSY = "Busy"  # every bind slot stayed taken for BIND_WAIT_S
    WRITE_FAILED = "WriteFailed"  # the Binding (or the pod's annotations) could not be written
    NOT_LEADER = "NotLeader"  # this replica does not hold the bind lease
    NOT_SYNCED = "NotSynced"  # the cache has not listed the cluster yet
    NO_API = "NoApiClient"  # an extender without an API client (a test's or a bench's)
    FORWARD_FAILED = "ForwardFailed"  # a standby could not reach the leader
    API_ERROR = "ApiError"  # a read or write a bind step needed failed at the API server
    INTERNAL = "Internal"  # a bind step failed on a bug (the log has its traceback)


@dataclass(frozen=True, slots=True)
class Refusal:
    why: Why
    message: str

    def __str__(self) -> str:
        return self.message
