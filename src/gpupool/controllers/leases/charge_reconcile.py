"""The charge auditor's writes: a Warning event `ChargeMismatch` for each live GpuLease charged
other than what it holds (`leases.charge_audit` decides), on the GpuLease and on its pod, and a
log line.

Each disagreement is reported once: again only when it changes (the lease's amount or holding
read otherwise), or after it was mended and came back, or after a restart of the controller (the
memory of what was reported is this process's, as the lease reconciler's NotAdmitted). The
metric (`gpupool_controller_lease_charge_mismatches`) is the observer's, from the same decision
over the admission round (`controllers.observe`). An event that cannot be written is logged and
the others are still written: one lease never stops the report of another.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import replace

from gpupool.adapters.kubernetes.leader import NotLeader
from gpupool.controllers.contain import lease_ref, pod_ref
from gpupool.controllers.leases.charge_audit import (
    REASON,
    CardSizes,
    ChargeAudit,
    ChargeFinding,
    audit_charges,
    card_sizes,
)
from gpupool.ports import ClusterApi
from gpupool.rfc3339 import format_time
from gpupool.state.lease import LeaseRecord
from gpupool.state.listed import ObjectReference
from gpupool.state.nodes import GpuNodeObject
from gpupool.state.pods import PodView

log = logging.getLogger("gpupool.controller.charges")


def audit_of(
    leases: Iterable[LeaseRecord],
    gpunodes: Iterable[GpuNodeObject],
    sizes: CardSizes | None = None,
) -> ChargeAudit:
    """The pure decision over the GpuNodes that read (an unreadable one reports no cards);
    `sizes`: the cards' sizes remembered between rounds."""
    return audit_charges(leases, (sizes or card_sizes)(list(gpunodes)))


class ChargeReporter:
    """Writes the events of a charge audit, each disagreement once (see the module)."""

    def __init__(
        self, api: ClusterApi, *, on_report: Callable[[str], None] = lambda reason: None
    ) -> None:
        self.api = api
        self.on_report = on_report  # each report written (the controller counts them)
        self._reported: dict[str, str] = {}  # lease key -> the problem last reported

    async def report(
        self,
        audit: ChargeAudit,
        leases: Mapping[str, ObjectReference],
        pods: Mapping[str, ObjectReference],
        now: float,
        judged: Collection[str] | None = None,
    ) -> list[ChargeFinding]:
        """Writes the new findings' events; returns the findings reported now. `leases`: lease
        key -> its reference; `pods`: pod uid -> its reference (a pod not there is read);
        `judged`: the lease keys the audit looked at (None: every lease there is), so a round
        over some leases forgets no report of the others."""
        current = {f.lease.key: f for f in audit.findings}
        scope = self._reported.keys() if judged is None else set(judged) & self._reported.keys()
        for key in list(scope):  # mended or gone: a later disagreement is news again
            if key not in current:
                del self._reported[key]
        stamp = format_time(now)
        written: list[ChargeFinding] = []
        for key, finding in current.items():
            if self._reported.get(key) == finding.problem:
                continue
            try:
                await self._write(finding, leases.get(key), pods, stamp)
            except (asyncio.CancelledError, NotLeader):
                raise
            except Exception:
                log.exception("charge audit: reporting lease %s failed; next round again", key)
                continue
            self._reported[key] = finding.problem
            written.append(finding)
        return written

    async def _write(
        self,
        finding: ChargeFinding,
        listed: ObjectReference | None,
        pods: Mapping[str, ObjectReference],
        stamp: str,
    ) -> None:
        lease = finding.lease
        log.warning("%s", finding.message)
        about = lease_ref(lease.name, lease.namespace)
        if listed is not None:  # the listing's reference carries the lease's uid
            about = replace(about, uid=listed.uid)
        await self.api.event(about, REASON, finding.message, warning=True, now_rfc3339=stamp)
        pod = pods.get(lease.pod.uid)
        if pod is None:  # not a tenant's pod as listed: read it (a finding is rare)
            found = await self.api.pod(lease.pod.namespace, lease.pod.name)
            if isinstance(found, PodView) and found.uid == lease.pod.uid:
                pod = pod_ref(found)  # else gone, unreadable, or another pod of that name
        if pod is not None:
            await self.api.event(pod, REASON, finding.message, warning=True, now_rfc3339=stamp)
        self.on_report(REASON)
