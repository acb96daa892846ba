"""The node heartbeat's wire: the Lease spec a renewal writes, the renewal times the controller
reads back, and when the agent's GpuNode status needs writing at all."""

from __future__ import annotations

from gpupool.adapters.kubernetes.node import lease_renewals
from gpupool.adapters.kubernetes.node_lease import lease_duration_s, renewal
from gpupool.adapters.kubernetes.reporter import gpunode_status, status_differs
from gpupool.domain.devices import Gpu
from gpupool.ports import GpuFacts, InventoryFacts, NodeReport

T0 = 1_767_225_600.25


def _report(healthy: bool = True) -> NodeReport:
    return NodeReport(
        node="n1",
        gpus=(Gpu(index=0, model="H100", uuid="GPU-n1-0", healthy=healthy),),
        facts=InventoryFacts("550.1", "12.4", (GpuFacts("GPU-n1-0", 132),)),
        reserve_pct=10.0,
        allocatable_bytes=(("GPU-n1-0", 70 * 2**30),),
    )


def test_a_renewal_reads_back_as_its_time() -> None:
    spec = renewal("gpupool-agent", lease_duration_s(10), T0)
    assert spec == {
        "holderIdentity": "gpupool-agent",
        "leaseDurationSeconds": 30,
        "renewTime": "2026-01-01T00:00:00.250000Z",
    }
    leases = [
        {"metadata": {"name": "n1"}, "spec": spec},
        {"metadata": {"name": "n2"}, "spec": {"holderIdentity": "gpupool-agent"}},  # never renewed
        {"metadata": {"name": "n3"}, "spec": {"renewTime": "yesterday"}},
    ]
    assert lease_renewals(leases) == {"n1": T0}


def test_the_lease_promises_three_periods_and_at_least_a_second() -> None:
    assert lease_duration_s(30) == 90
    assert lease_duration_s(0.1) == 1


def test_an_unchanged_report_needs_no_write() -> None:
    status = gpunode_status(_report())
    assert "heartbeat" not in status  # the Lease carries it: the status holds no time
    assert not status_differs(status, gpunode_status(_report()))
    # the controller's conditions are its own: they do not make the agent write
    held = {**status, "conditions": [{"type": "Heartbeat", "status": "True"}]}
    assert not status_differs(held, status)


def test_a_changed_report_or_a_foreign_health_needs_a_write() -> None:
    status = gpunode_status(_report())
    assert status_differs(status, gpunode_status(_report(healthy=False)))
    assert status_differs(None, status)  # a GpuNode without a status yet
    assert status_differs({**status, "health": "Suspect"}, status)  # the agent is back
