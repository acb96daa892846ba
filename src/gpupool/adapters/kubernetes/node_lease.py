"""A GPU node's liveness: one `coordination.k8s.io/v1` Lease per node, as kubelet's node Lease in
kube-node-lease (KEP-589). The node agent (on kwok nodes, the dev cluster's heartbeat process)
renews it every heartbeat period; the controller's node health reads its `renewTime`.

Why a Lease and not the GpuNode: a renewal is a ~300-byte object that only the controller lists,
where a GpuNode status write is a few kilobytes that wakes every GpuNode watcher (the extender's
informer, the controller, the web view). The GpuNode is written only when the report changes.

A renewal is one merge patch of `spec` (no read first, no resourceVersion, so no conflict to
retry); bench/node_heartbeat_cost.py found it within noise of a replace in the API server's CPU,
with a fifth of the bytes. 404 creates the Lease.
The Leases live in one namespace, NODE_LEASE_NAMESPACE, named after their node; the chart and the
dev cluster create it (deploy/rbac/namespace.yaml), with the agent's and controller's rights there
(deploy/rbac/node-lease.yaml).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.types import PatchType

from gpupool.adapters.wire.times import format_time
from gpupool.domain.errors import GpupoolError

NODE_LEASE_NAMESPACE = "gpupool-node-lease"
AGENT_HOLDER = "gpupool-agent"


class NodeLeaseNamespaceMissing(GpupoolError):
    """The Leases' namespace does not exist, so no node can heartbeat."""

    def __init__(self, node: str) -> None:
        super().__init__(
            f"cannot create the Lease of node {node}: namespace {NODE_LEASE_NAMESPACE} does not "
            "exist; install the chart (nodeLease.createNamespace) or kubectl apply -f "
            "deploy/rbac/namespace.yaml"
        )


def lease_duration_s(heartbeat_s: float) -> int:
    """What the Lease says its holder promises: three heartbeat periods (kubelet: 40 s for a 10 s
    period). Informational: the controller's --suspect-after and --lost-after decide."""
    return max(1, round(3 * heartbeat_s))


def renewal(holder: str, duration_s: int, now: float) -> dict[str, Any]:
    """The Lease spec a renewal writes (pure)."""
    return {
        "holderIdentity": holder,
        "leaseDurationSeconds": duration_s,
        "renewTime": format_time(now),
    }


async def renew_node_lease(
    client: AsyncClient, node: str, *, holder: str, duration_s: int, now: float
) -> None:
    """Write `node`'s Lease renewed at `now`, created when missing; NodeLeaseNamespaceMissing
    without its namespace, ApiError on any other refusal."""
    spec = renewal(holder, duration_s, now)
    try:
        await client.patch(
            Lease, node, {"spec": spec}, namespace=NODE_LEASE_NAMESPACE,
            patch_type=PatchType.MERGE,
        )  # fmt: skip
        return
    except ApiError as err:
        if err.status.code != 404:
            raise
    renewed = dt.datetime.fromtimestamp(now, dt.UTC)
    lease = Lease(
        metadata=ObjectMeta(name=node, namespace=NODE_LEASE_NAMESPACE),
        spec=LeaseSpec(
            holderIdentity=holder,
            leaseDurationSeconds=duration_s,
            acquireTime=renewed,
            renewTime=renewed,
        ),
    )
    try:
        await client.create(lease)
    except ApiError as err:
        if err.status.code == 404:
            raise NodeLeaseNamespaceMissing(node) from None
        if err.status.code != 409:  # made meanwhile (by an agent restarted beside us): renew it
            raise
        await client.patch(
            Lease, node, {"spec": spec}, namespace=NODE_LEASE_NAMESPACE,
            patch_type=PatchType.MERGE,
        )  # fmt: skip
