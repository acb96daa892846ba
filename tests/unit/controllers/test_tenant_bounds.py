"""What tenants write, bounded, as the controller meets it (objects that got past the webhook).

A pod's lease TTL is never longer than its tenant's leaseTTLSeconds nor than 366 days, even on
a pod created while the webhook was away: the controller reads a TTL beyond the bound as the
bound, and the expiry plan cuts a pod's TTL to its tenant's, saying so; the expiry it writes is a
date the wire can carry (the poisoned `100000000h` once failed every round of the lease loop).
A GpuQuota beyond the bounds stops only its own tenant's admission."""

from __future__ import annotations

import asyncio
from typing import Any

from fake_cluster import FakeCluster, lease_json, pod_json, quota_json

from gpupool.adapters.kubernetes.lease import lease_from_json
from gpupool.adapters.kubernetes.pod_view import read_pod
from gpupool.controllers.admission.reconcile import AdmissionReconciler
from gpupool.controllers.leases.expiry import plan_expiry
from gpupool.domain.bounds import MAX_DURATION_S
from gpupool.state.lease_terms import TenantLeaseTerms

T0 = 1_767_225_600.0


def _pair(name: str, ttl: str | None) -> tuple[Any, Any]:
    notes = {} if ttl is None else {"gpupool.io/lease-ttl": ttl}
    pod = pod_json(name, "alpha", node="n1", phase="Running", annotations=notes)
    return read_pod(pod), lease_from_json(lease_json(pod, phase="Active", start=T0))


def test_a_pods_ttl_above_its_tenants_is_cut_to_it() -> None:
    view, lease = _pair("long", "100000000h")
    tenants = {"alpha": TenantLeaseTerms(default_ttl_s=30.0)}
    (terms,) = plan_expiry([lease], {view.uid: view}, tenants, T0 + 1).terms
    assert (terms.ttl_s, terms.expiry) == (30.0, T0 + 30)
    assert "the pod asked for 3.16224e+07s, cut to tenant alpha's leaseTTLSeconds of 30s" in (
        terms.message
    )


def test_a_pods_ttl_within_its_tenants_is_its_own() -> None:
    view, lease = _pair("short", "20s")
    tenants = {"alpha": TenantLeaseTerms(default_ttl_s=30.0)}
    (terms,) = plan_expiry([lease], {view.uid: view}, tenants, T0 + 1).terms
    assert (terms.ttl_s, terms.message.endswith("the pod's TTL of 20s")) == (20.0, True)


def test_without_a_tenant_ttl_a_poisoned_ttl_reads_as_366_days() -> None:
    view, lease = _pair("long", "100000000h")
    assert view.lease_ttl_s == MAX_DURATION_S
    (terms,) = plan_expiry([lease], {view.uid: view}, {}, T0 + 1).terms
    assert terms.expiry == T0 + MAX_DURATION_S
    assert "expires at 2027-01-02T00:00:00" in terms.message  # a date RFC 3339 can write


def test_an_unreadable_ttl_falls_back_to_the_tenants() -> None:
    view, lease = _pair("bad", "soon")
    tenants = {"alpha": TenantLeaseTerms(default_ttl_s=60.0)}
    (terms,) = plan_expiry([lease], {view.uid: view}, tenants, T0 + 1).terms
    assert terms.ttl_s == 60.0 and "default TTL" in terms.message


def test_a_quota_beyond_the_bounds_stops_only_its_own_tenant() -> None:
    """A GpuQuota of `nominal: 1e400` made before the webhook checked it: its tenant's pod waits,
    told why; another tenant's pod is admitted in the same round."""
    poisoned = quota_json("alpha", 1)
    poisoned["spec"]["nominal"] = "1e400"
    cluster = FakeCluster(
        pods=[
            pod_json("a1", "alpha", 12, gated=True, created=T0 - 20),
            pod_json("b1", "beta", 12, gated=True, created=T0 - 10),
        ],
        quotas=[poisoned, quota_json("beta", 24)],
    )
    asyncio.run(AdmissionReconciler(cluster, lambda: T0).reconcile())
    assert cluster.pods["ns/b1"]["spec"]["schedulingGates"] == []
    assert cluster.pods["ns/a1"]["spec"]["schedulingGates"] == [{"name": "gpupool.io/quota"}]
    note = cluster.pods["ns/a1"]["metadata"]["annotations"]["gpupool.io/queue"]
    assert "GpuQuota 'alpha' is invalid" in note and "exponent e400" in note
