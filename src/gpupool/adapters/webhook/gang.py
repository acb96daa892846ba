"""A pod joining a gang, checked against the gang's members that already exist (pure).

The webhook lists the pods of the pod's namespace that carry the same `gpupool.io/gang` label
(`Lookups.gang_members`) and refuses, each with its own message:
- a member that disagrees on `gpupool.io/gang-size` with a live member;
- a member whose tenant differs from a live member's (its namespace's tenant label changed in
  between: a gang is admitted against one tenant's quota);
- a member beyond the size: the gang already has that many live members. A member that ended
  (Succeeded/Failed) or is being deleted no longer counts, so a replacement may join in its place
  (the gang's live members are admitted together again: docs/gangs.md).
Two members created at the same instant can both pass (the list is not a lock); the admission
queue then sees the extra or the disagreement and says so on every member.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpupool.adapters.wire import names
from gpupool.domain.errors import InvalidGang
from gpupool.domain.gang import GangMark
from gpupool.state.pods import TERMINAL_PHASES


@dataclass(frozen=True, slots=True)
class GangMember:
    """An existing pod of the gang, as the webhook needs it."""

    name: str
    tenant: str
    size: str | None  # its gpupool.io/gang-size as written (its own create checked it)
    live: bool  # not finished and not being deleted


def read_member(pod: Mapping[str, Any]) -> GangMember:
    meta: Mapping[str, Any] = pod.get("metadata") or {}
    labels: Mapping[str, Any] = meta.get("labels") or {}
    annotations: Mapping[str, Any] = meta.get("annotations") or {}
    phase = (pod.get("status") or {}).get("phase")
    size = annotations.get(names.ANN_GANG_SIZE)
    return GangMember(
        name=str(meta.get("name") or ""),
        tenant=str(labels.get(names.LABEL_TENANT) or names.DEFAULT_TENANT),
        size=None if size is None else str(size).strip(),
        live=phase not in TERMINAL_PHASES and not meta.get("deletionTimestamp"),
    )


def check_members(
    gang: GangMark, pod_name: str, tenant: str, members: Sequence[GangMember]
) -> None:
    """Refuse the pod if it cannot join `gang` as it stands (InvalidGang says why)."""
    live = [m for m in members if m.live and m.name != pod_name]
    for member in live:
        if member.size is not None and member.size != str(gang.size):
            raise InvalidGang(
                f"the pod joins gang {gang.name!r} with {names.ANN_GANG_SIZE}: {gang.size}, but "
                f"its member {member.name!r} says {member.size}; every member of a gang carries "
                f"the same size"
            )
        if member.tenant != tenant:
            raise InvalidGang(
                f"gang {gang.name!r} has members of tenant {member.tenant!r} ({member.name!r}); "
                f"this pod would be tenant {tenant!r}: a gang is admitted against one tenant's "
                f"quota, so all its members belong to one tenant"
            )
    if len(live) >= gang.size:
        shown = ", ".join(sorted(m.name for m in live)[:8])
        raise InvalidGang(
            f"gang {gang.name!r} already has its {gang.size} member(s) ({shown}); a member that "
            f"ended or is being deleted makes room for its replacement, so delete one first, "
            f"or give this pod another gang"
        )
