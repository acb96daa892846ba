"""The node health reconciler: the nodes' heartbeats (their Leases' renewTime) to Suspect/Lost on
their GpuNodes, a Lost node's leases to Lost and its GPU pods deleted (`node_health.plan` decides;
this applies it). A write that fails raises: the manager logs it and the next round, from the API
server's state, plans it again. One object's failure fails only that object
(`controllers.contain`): a GpuNode or GpuLease that cannot be read, a node whose plan raises, a
node's or lease's write that fails is set aside with a ReconcileFailed event and retried with
backoff; the other nodes go on.

A node whose Lease goes missing (deleted while its agent is dead) keeps the last renewal this
replica saw: it goes Suspect, then Lost, as a stale one does. One never seen (a GpuNode made by
hand, a replica started after the Lease was deleted) is not judged, as a node that never
heartbeat was not before Leases.

A renewal wakes no round: after each round `due_at` says when the next node's heartbeat grows
old enough to judge (`node_health.plan.next_check`, kept per node), or when an object set aside
is retried; the manager runs the loop then (or sooner, on a GpuNode or GpuLease change).

A round looks only at the nodes it is owed for (`Owed`): those whose GpuNode changed, those a
changed GpuLease is on, those whose own deadline came. Each is read by name from the watch
cache, so at 5,000 nodes a round costs what changed, not the cluster; the GpuLeases are read
whole only when a judged node is Lost (its leases end). A round owed everything (the first, the
manager's safety-net period, a retry of an object set aside, one after a failed round) judges
every node as before."""

from __future__ import annotations

import logging
from collections.abc import Collection
from functools import partial

from gpupool.adapters.kubernetes.decoded import reference
from gpupool.controllers.contain import Containment, lease_ref
from gpupool.controllers.deadlines import Deadlines
from gpupool.controllers.due import soonest
from gpupool.controllers.node_health.plan import (
    LOST_S,
    SUSPECT_S,
    HealthPlan,
    LoseLease,
    SetHealth,
    next_check,
    plan_node_health,
)
from gpupool.controllers.reads import READ, decode_leases
from gpupool.controllers.work_queue import EVERYTHING, Owed
from gpupool.ports import Clock, ClusterApi, Outcomes
from gpupool.rfc3339 import format_time
from gpupool.state.lease_writes import LeaseStatusWrite
from gpupool.state.status_writes import Condition, GpuNodeHealthWrite, StoredStatus

log = logging.getLogger("gpupool.controller.nodes")

LOOP = "node-health"


class NodeHealthReconciler:
    def __init__(
        self,
        api: ClusterApi,
        clock: Clock,
        *,
        suspect_s: float = SUSPECT_S,
        lost_s: float = LOST_S,
        outcomes: Outcomes | None = None,
        contain: Containment | None = None,
    ) -> None:
        self.api = api
        self.outcomes = outcomes
        self.clock = clock
        self.suspect_s = suspect_s
        self.lost_s = lost_s
        self.contain = contain if contain is not None else Containment(LOOP, api)
        self._renewed: dict[str, float] = {}  # node -> its Lease's last renewal seen
        self._due: Deadlines[str] = Deadlines()  # node -> when it is next judged (wall time)
        self._round_at = 0.0  # when the last round began (wall time)

    async def reconcile(self, owed: Owed = EVERYTHING) -> HealthPlan:
        now = self._round_at = self.clock()
        retry = self.contain.next_retry(float("-inf"))
        whole = owed.everything or (retry is not None and retry <= now)  # a retry: all as before
        try:
            return await self._reconcile(now, None if whole else await self._owed(owed, now))
        finally:
            await self.contain.report(now)

    def due_at(self) -> float | None:
        """When the loop next has timed work, as its last round saw it (wall time)."""
        return soonest(self._due.first(), self.contain.next_retry(self._round_at))

    async def _owed(self, owed: Owed, now: float) -> set[str]:
        """The nodes a round owed for `owed` judges: those whose GpuNode changed, those a changed
        GpuLease is on, those whose deadline came."""
        names = {key for kind, key in owed.changed if kind == "gpunodes"}
        lease_keys = [key for kind, key in owed.changed if kind == "gpuleases"]
        if lease_keys:
            changed = await self.api.leases(keys=lease_keys)
            names |= {lease.node for lease, _ in changed.read if lease.node}
        return names | self._due.pop_due(now)  # and the nodes whose deadline came

    async def _reconcile(self, now: float, names: Collection[str] | None) -> HealthPlan:
        """Judge `names` (None: every GpuNode)."""
        contain = self.contain
        if names is not None and not names:
            return HealthPlan((), (), ())
        listed = await self.api.gpu_nodes(names)
        read = contain.decode(READ, "GpuNode", listed, now, every=names is None)
        refs = {n.name: ref for n, ref in read}
        nodes = [n for n, _ in read]
        renewed = await self.api.node_renewals(names)
        if names is None:  # a node gone (its GpuNode deleted) is forgotten
            self._renewed = {n: at for n, at in self._renewed.items() if n in refs}
            self._due.keep(lambda n: n in refs)
        else:
            for gone in set(names) - set(refs):
                self._renewed.pop(gone, None)
                self._due.drop(gone)
        # a Lease gone keeps its node's last renewal seen (it goes Suspect, then Lost)
        self._renewed.update((n, at) for n, at in renewed.items() if n in refs)
        heartbeats = self._renewed
        any_lost = any(
            now - heartbeats[n.name] >= self.lost_s for n in nodes if n.name in heartbeats
        )
        # a round over every node reads every lease (an unreadable one is set aside as before);
        # one over some nodes only when one of them is Lost (its leases end)
        wanted = names is None or any_lost
        leases = decode_leases(contain, await self.api.leases(), now) if wanted else []
        plan = contain.plan(
            "health", "GpuNode", nodes, lambda n: n.name,
            lambda some: plan_node_health(some, heartbeats, leases, now,
                                          suspect_s=self.suspect_s, lost_s=self.lost_s),
            now, lambda n: refs[n.name], every=names is None,
        )  # fmt: skip
        for node in nodes:
            at = next_check([node], heartbeats, now, suspect_s=self.suspect_s, lost_s=self.lost_s)
            if at is None and node.name not in heartbeats:  # its first heartbeat wakes nothing
                at = now + self.suspect_s
            self._due.schedule(node.name, at)
        stamp = format_time(now)
        for change in plan.health:
            held = refs.get(change.node) or reference("GpuNode", change.node)
            stored = listed.status_of(held.key)
            await contain.handle("health", held,
                                 partial(self._set_health, change, stamp, stored), now)  # fmt: skip
        # A lost lease's pod goes first, then the lease: a round that fails between the two
        # finds the lease still live next time and deletes (or finds gone) its pod again, where
        # the other order would leave a pod on a lost node behind an ended lease for ever.
        deleted: set[tuple[str, str]] = set()
        for lost in plan.lose:
            lease = lost.lease
            ref = lease_ref(lease.name, lease.namespace)
            await contain.handle("lost", ref,
                                 partial(self._lose, lost, deleted, now, stamp), now)  # fmt: skip
        return plan

    async def _set_health(self, change: SetHealth, stamp: str, stored: StoredStatus) -> None:
        """`stored`: the GpuNode's status as listed (the agent's conditions are kept)."""
        log.warning("GpuNode %s: %s (%s)", change.node, change.health, change.message)
        heartbeat = Condition(
            type="Heartbeat",
            status="True" if change.health == "Healthy" else "False",
            reason=change.health,
            message=change.message,
            last_transition_time=stamp,
        )
        # the list is replaced whole: keep the agent's conditions (OtherGpuPath) as they are
        conditions = (*stored.others("Heartbeat"), heartbeat)
        await self.api.patch_gpu_node_status(
            change.node, GpuNodeHealthWrite(change.health, conditions)
        )

    async def _lose(
        self, lost: LoseLease, deleted: set[tuple[str, str]], now: float, stamp: str
    ) -> None:
        lease = lost.lease
        pod = (lease.pod.namespace, lease.pod.name)
        if pod not in deleted:
            deleted.add(pod)
            if await self.api.delete_pod(*pod, grace_s=0):
                log.warning("deleted pod %s from lost node %s", lease.pod.key, lease.node)
                if self.outcomes is not None:
                    self.outcomes.evicted("NodeLost")
        lost_at = LeaseStatusWrite(
            lost.to.phase, "NodeLost", lost.message, now, condition="Lost",
            ended_at=lost.to.ended_at or now, gib_hours=lost.gib_hours,
        )  # fmt: skip
        await self.api.move_lease(lease.namespace, lease.name, lost_at)
