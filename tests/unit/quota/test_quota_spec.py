from __future__ import annotations

import pytest

from gpupool.domain.errors import InvalidQuota, InvalidRequest
from gpupool.domain.requests import Request
from gpupool.domain.units import GiB
from gpupool.quota.book import QuotaBook
from gpupool.quota.resource import Resource, demand_of
from gpupool.quota.spec import Budget, OnExhaustion, TenantQuota


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"nominal": 10, "guaranteed": 11}, "guaranteed quota (11m) is above the nominal quota"),
        ({"nominal": -1}, "nominal quota must be 0 or more"),
        ({"nominal": 10, "borrow_limit": -5, "cohort": "c"}, "borrow limit must be 0 or more"),
        ({"nominal": 10, "lend_limit": -1, "cohort": "c"}, "lend limit must be 0 or more"),
        ({"nominal": 10, "lend_limit": 20, "cohort": "c"}, "can lend only quota it has"),
        ({"nominal": 10, "borrow_limit": 5}, "no cohort to borrow from"),
        ({"nominal": 10, "max_pods": -1}, "pod limit must be 0 or more"),
        ({"nominal": 10, "reclaim_grace_s": -1.0}, "grace period must be 0 or more"),
    ],
)
def test_impossible_quotas_are_rejected_with_the_fix(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidQuota, match="tenant 'a'") as err:
        TenantQuota(name="a", resource=Resource.GPU, **kwargs)  # type: ignore[arg-type]
    assert message in str(err.value)


def test_budget_validation_and_windows() -> None:
    with pytest.raises(InvalidQuota, match="window"):
        Budget(limit=10, window_s=0)
    with pytest.raises(InvalidQuota, match="0 or more hours"):
        Budget(limit=-1, window_s=3600)
    budget = Budget(limit=10, window_s=3600)
    assert budget.window_of(3599.9) == 0
    assert budget.window_of(3600) == 1
    assert budget.window_start(2) == 7200
    assert OnExhaustion.parse("preemptible") is OnExhaustion.PREEMPTIBLE
    assert OnExhaustion.parse("drain") is OnExhaustion.DRAIN
    with pytest.raises(InvalidQuota, match="'block', 'preemptible' or 'drain'"):
        OnExhaustion.parse("drop")


def test_lendable_and_private_split() -> None:
    q = TenantQuota(name="a", nominal=100, lend_limit=30, cohort="c")
    assert (q.lendable, q.private) == (30, 70)
    alone = TenantQuota(name="b", nominal=100)
    assert (alone.lendable, alone.private) == (0, 100)


def test_book_reports_guarantees_beyond_capacity() -> None:
    quotas = [
        TenantQuota(name="a", nominal=40 * GiB, guaranteed=30 * GiB, cohort="c"),
        TenantQuota(name="b", nominal=40 * GiB, guaranteed=30 * GiB, cohort="c"),
    ]
    QuotaBook(quotas, capacity={Resource.GPU_MEMORY: 60 * GiB})
    with pytest.raises(InvalidQuota, match=r"add up to 60Gi but the cluster has 50Gi \(c: 60Gi\)"):
        QuotaBook(quotas, capacity={Resource.GPU_MEMORY: 50 * GiB})


def test_book_rejects_duplicates_and_mixed_cohorts() -> None:
    with pytest.raises(InvalidQuota, match="two quotas"):
        QuotaBook([TenantQuota(name="a", nominal=1), TenantQuota(name="a", nominal=2)])
    with pytest.raises(InvalidQuota, match="mixes quota resources"):
        QuotaBook(
            [
                TenantQuota(name="a", nominal=1, cohort="c"),
                TenantQuota(name="b", nominal=1, cohort="c", resource=Resource.GPU),
            ]
        )


@pytest.mark.parametrize(
    ("request_kw", "resource", "card", "expected"),
    [
        ({"gpu_count": 1, "gpu_milli": 460}, Resource.GPU, None, 460),
        ({"gpu_count": 4}, Resource.GPU, None, 4000),
        ({"gpu_count": 1, "gpu_memory_bytes": 12 * GiB}, Resource.GPU_MEMORY, None, 12 * GiB),
        ({"gpu_count": 1, "gpu_milli": 500}, Resource.GPU_MEMORY, 16 * GiB, 8 * GiB),
        ({"gpu_count": 1, "gpu_memory_bytes": 4 * GiB}, Resource.GPU, 16 * GiB, 250),
        ({"cpu_milli": 1000}, Resource.GPU, None, 0),
    ],
)
def test_demand_in_either_resource(
    request_kw: dict[str, object], resource: Resource, card: int | None, expected: int
) -> None:
    request = Request(name="p", **request_kw)  # type: ignore[arg-type]
    assert demand_of(request, resource, card) == expected


def test_demand_needs_the_card_to_convert() -> None:
    share = Request(name="p", gpu_count=1, gpu_milli=500)
    with pytest.raises(InvalidRequest, match="express the quota in 'gpu'"):
        demand_of(share, Resource.GPU_MEMORY)
    with pytest.raises(InvalidRequest, match="unknown quota resource"):
        Resource.parse("vram")
