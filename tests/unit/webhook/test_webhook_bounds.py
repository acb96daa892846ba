"""What a tenant writes is bounded (`domain.bounds`), and the webhook refuses what is beyond with
the bound named: a GpuQuota's quantities, counts and durations; a pod's gpupool.io/lease-ttl
beyond 366 days or beyond its tenant's leaseTTLSeconds. Values at the bounds pass."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from gpupool.adapters.webhook.mutate import ClusterFacts, mutate_pod
from gpupool.adapters.webhook.review import parse_review, review_quota
from gpupool.adapters.webhook.server import build_app
from gpupool.adapters.wire.lease_terms import (
    InvalidLeaseTtl,
    LeaseTtlTooLong,
    capped_pod_ttl,
    parse_ttl,
    read_tenant_terms,
)
from gpupool.adapters.wire.quotas import read_quota
from gpupool.domain.bounds import MAX_DURATION_S
from gpupool.domain.errors import InvalidQuota
from gpupool.domain.units import GiB
from gpupool.quota.spec import TenantQuota

STAMP = "2026-01-02T03:04:05.000006Z"
CARDS = ClusterFacts(cards=(("A100-80GB", 72 * GiB),))
YEAR = 31_622_400  # 366 days


def _quota(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "alpha"}, "spec": spec}


def _review(obj: Mapping[str, Any], operation: str = "CREATE", namespace: str = "") -> bytes:
    request = {"uid": "u1", "operation": operation, "namespace": namespace, "object": obj}
    return json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    ).encode()


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"nominal": "1e400"}, "exponent e400"),
        ({"nominal": "9223372036854775808"}, "beyond the largest quantity Kubernetes holds"),
        ({"nominal": "2Ei"}, 'spec.nominal is "2Ei", above the most GPU memory a quota may name'),
        ({"nominal": "1Ei", "guaranteed": "1025Pi"}, 'spec.guaranteed is "1025Pi", above'),
        ({"nominal": "1Gi", "cohort": "c", "borrowLimit": "2Ei"}, "(1Ei, far beyond any"),
        ({"nominal": "1Gi", "lendLimit": "4Ei"}, 'spec.lendLimit is "4Ei"'),
        ({"nominal": "1Gi", "computeLimit": "1000001"}, "above the most a quota may name"),
        ({"nominal": "1000001", "resource": "gpu"}, "looks like a memory size"),
        ({"nominal": "1" * 80}, "80 characters long"),
        ({"nominal": "1Gi", "maxPods": 1_000_001}, "above the most gpupool accepts (1,000,000)"),
        ({"nominal": "1Gi", "leaseTTLSeconds": YEAR + 1}, "above the longest gpupool accepts"),
        ({"nominal": "1Gi", "reclaimGracePeriodSeconds": 2**31 - 1}, "31622400 seconds (8784h"),
        ({"nominal": "1Gi", "lendAfterIdleSeconds": 2**62}, "366 days"),
        ({"nominal": "1Gi", "priority": 2**40}, "spec.priority is"),
        (
            {"nominal": "1Gi", "budget": {"limitHours": 1e300, "windowSeconds": 60}},
            "spec.budget.limitHours must be from 0 to 1e+13 hours",
        ),
        (
            {"nominal": "1Gi", "budget": {"limitHours": 1, "windowSeconds": YEAR + 1}},
            "spec.budget.windowSeconds must be from 1 to 31622400 seconds",
        ),
        (
            {"nominal": "1Gi", "budget": {"limitHours": "9" * 500, "windowSeconds": 60}},
            "spec.budget needs limitHours (a number)",
        ),
    ],
)
def test_a_quota_beyond_a_bound_is_refused_with_the_bound_named(
    spec: dict[str, Any], words: str
) -> None:
    with pytest.raises(InvalidQuota) as caught:
        read_quota(_quota(**spec))
    assert str(caught.value).startswith("GpuQuota 'alpha': ")
    assert words in str(caught.value)
    response = review_quota(parse_review(_review(_quota(**spec))), ())["response"]
    assert response["allowed"] is False
    assert words in response["status"]["message"]


def test_a_quota_at_its_bounds_is_admitted_and_read_exactly() -> None:
    spec = {
        "nominal": "1Ei",
        "guaranteed": "1Ei",
        "lendLimit": "1Ei",
        "cohort": "c",
        "borrowLimit": "1Ei",
        "computeLimit": "1000000",
        "maxPods": 1_000_000,
        "leaseTTLSeconds": YEAR,
        "reclaimGracePeriodSeconds": YEAR,
        "lendAfterIdleSeconds": YEAR,
        "priority": 2**31 - 1,
        "budget": {"limitHours": 10**13, "windowSeconds": YEAR},
    }
    q = read_quota(_quota(**spec))
    assert (q.nominal, q.borrow_limit, q.compute_limit_milli) == (2**60, 2**60, 10**9)
    assert (q.max_pods, q.reclaim_grace_s, q.lend_after_idle_s) == (10**6, YEAR, YEAR)
    assert q.budget is not None and q.budget.window_s == YEAR
    assert review_quota(parse_review(_review(_quota(**spec))), ())["response"]["allowed"]
    gpus = read_quota(_quota(nominal="1000000", resource="gpu"))
    assert gpus.nominal == 10**9


def test_the_controllers_terms_of_an_old_quota_beyond_the_bound_read_as_the_bound() -> None:
    _, terms = read_tenant_terms(_quota(nominal="1Gi", leaseTTLSeconds=2**31 - 1))
    assert terms.default_ttl_s == MAX_DURATION_S
    _, terms = read_tenant_terms(_quota(nominal="1Gi", reclaimGracePeriodSeconds=2**31 - 1))
    assert terms.grace_s == MAX_DURATION_S


def _pod(ttl: str | None) -> dict[str, Any]:
    limits = {"gpupool.io/gpu-memory": "1Gi"}
    notes = {} if ttl is None else {"gpupool.io/lease-ttl": ttl}
    return {
        "metadata": {"name": "p", "namespace": "ns", "annotations": notes},
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
    }


@pytest.mark.parametrize("text", ["100000000h", "8785h", "31622401s", "527041m", "8784h1s"])
def test_a_lease_ttl_beyond_366_days_is_refused_with_the_bound(text: str) -> None:
    with pytest.raises(LeaseTtlTooLong) as caught:
        mutate_pod(_pod(text), {}, STAMP, CARDS)
    assert str(caught.value) == (
        f"annotation gpupool.io/lease-ttl is {text!r}, longer than the longest lease gpupool "
        f"grants (8784h, 366 days); ask for at most 8784h and renew the lease before it ends "
        f"(annotation gpupool.io/renew)"
    )


def test_a_lease_ttl_at_the_bound_passes() -> None:
    assert parse_ttl("8784h") == MAX_DURATION_S == parse_ttl("31622400s")
    assert mutate_pod(_pod("8784h"), {}, STAMP, CARDS).tenant == "default"


def test_a_lease_ttl_too_long_to_read_is_refused_before_it_is_read() -> None:
    with pytest.raises(InvalidLeaseTtl, match="is 65 characters long; a duration has at most 64"):
        parse_ttl("1" * 64 + "s")


def test_the_controller_reads_a_ttl_beyond_the_bound_as_the_bound_and_a_bad_one_as_none() -> None:
    assert capped_pod_ttl({"gpupool.io/lease-ttl": "100000000h"}) == MAX_DURATION_S
    assert capped_pod_ttl({"gpupool.io/lease-ttl": "-1h"}) is None
    assert capped_pod_ttl({"gpupool.io/lease-ttl": "9" * 5000 + "s"}) is None
    assert capped_pod_ttl({"gpupool.io/lease-ttl": "90m"}) == 5400
    assert capped_pod_ttl({}) is None


def test_a_lease_ttl_longer_than_the_tenants_is_refused_and_one_within_it_passes() -> None:
    facts = ClusterFacts(cards=CARDS.cards, tenant_lease_ttl_s=30.0)
    with pytest.raises(LeaseTtlTooLong) as caught:
        mutate_pod(_pod("1h"), {"gpupool.io/tenant": "alpha"}, STAMP, facts)
    assert str(caught.value) == (
        "annotation gpupool.io/lease-ttl asks for 3600s, longer than tenant alpha's leases may "
        "live (its GpuQuota's leaseTTLSeconds: 30s); ask for at most 30s and renew the lease "
        "(annotation gpupool.io/renew), or leave the annotation out"
    )
    assert mutate_pod(_pod("30s"), {"gpupool.io/tenant": "alpha"}, STAMP, facts).tenant == "alpha"
    assert mutate_pod(_pod(None), {"gpupool.io/tenant": "alpha"}, STAMP, facts).tenant == "alpha"


class Lookups:
    """The webhook's `Lookups`: tenant alpha's quota sets leaseTTLSeconds 30; `lease_ttl` counts
    its calls (a pod without its own TTL must not cost a read)."""

    def __init__(self, ttl: float | None = 30.0, broken: bool = False) -> None:
        self.ttl = ttl
        self.broken = broken
        self.asked: list[str] = []

    async def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        return {"gpupool.io/tenant": "alpha"}

    async def quotas(self) -> list[TenantQuota]:
        return []

    async def cards(self) -> tuple[tuple[str, int], ...]:
        return (("A100-80GB", 72 * GiB),)

    async def gang_members(self, namespace: str, gang: str) -> list[Mapping[str, Any]]:
        return []

    async def lease_ttl(self, tenant: str) -> float | None:
        self.asked.append(tenant)
        if self.broken:
            raise ConnectionError("[Errno 111] Connection refused")
        return self.ttl


def _answers(lookups: Lookups, *pods: dict[str, Any]) -> list[dict[str, Any]]:
    async def run() -> list[dict[str, Any]]:
        app = build_app(lookups, lambda: 1_767_225_600.0)  # type: ignore[arg-type]
        async with TestClient(TestServer(app)) as client:
            out = []
            for pod in pods:
                http = await client.post("/mutate/pods", data=_review(pod, namespace="ns"))
                out.append((await http.json())["response"])
            return out

    return asyncio.run(run())


def test_the_server_reads_the_tenants_ttl_only_for_a_pod_that_asks_for_its_own() -> None:
    lookups = Lookups()
    long, short, none = _answers(lookups, _pod("2h"), _pod("20s"), _pod(None))
    assert long["allowed"] is False
    assert "longer than tenant alpha's leases may live" in long["status"]["message"]
    assert short["allowed"] is True and none["allowed"] is True
    assert lookups.asked == ["alpha", "alpha"]


def test_an_unreadable_quota_leaves_the_ttl_to_the_controller() -> None:
    (answer,) = _answers(Lookups(broken=True), _pod("2h"))
    assert answer["allowed"] is True  # the controller cuts it to the tenant's TTL
    (answer,) = _answers(Lookups(broken=True), _pod("100000000h"))
    assert answer["allowed"] is False and "8784h" in answer["status"]["message"]
