"""The status writes of GpuQuota, GpuNode and GpuPool: the JSON the adapter sends for each value
(what the CRDs and the e2e tests read), and what is stored read back into the same values, so a
writer that finds its own status stored writes nothing."""

from __future__ import annotations

from dataclasses import replace

from gpupool.adapters.kubernetes.status_writes import (
    gpu_node_health_json,
    pool_status_json,
    quota_status_json,
    stored_status,
)
from gpupool.state.status_writes import (
    BudgetFields,
    Condition,
    DefragRecord,
    GpuNodeHealthWrite,
    PoolFields,
    PoolStatusWrite,
    QueueLine,
    QuotaStatusWrite,
)

T0 = "2026-01-01T00:00:00Z"
BUDGET = BudgetFields(1.5, 8.5, 10.0, "GiB-hours", 0.25, T0, "2026-02-01T00:00:00Z", False, None)
QUOTA = QuotaStatusWrite(
    "12Gi", 12 * 2**30, "0", 0, "4Gi", 4 * 2**30, 1, 1, (QueueLine("ns", "p", 1, "waits"),), 3
)
FIELDS = PoolFields(2, 1, 8, "640Gi", 640 * 2**30, "12Gi", 12 * 2**30, "3.0%", 0)
HEARTBEAT = Condition("Heartbeat", "False", "Suspect", "no heartbeat for 40s", T0)
AGENTS = Condition("OtherGpuPath", "True", "DevicePlugin", "nvidia.com/gpu is offered", T0)


def test_a_quota_status_is_the_json_the_crd_takes_with_budget_fields_removed_when_none() -> None:
    assert quota_status_json(QUOTA) == {
        "used": "12Gi",
        "usedAmount": 12 * 2**30,
        "borrowed": "0",
        "borrowedAmount": 0,
        "lent": "4Gi",
        "lentAmount": 4 * 2**30,
        "pods": 1,
        "queued": 1,
        "queue": [{"namespace": "ns", "name": "p", "position": 1, "reason": "waits"}],
        "observedGeneration": 3,
        "hoursUsed": None,
        "hoursRemaining": None,
        "hoursLimit": None,
        "hoursUnit": None,
        "hoursPerHour": None,
        "windowStart": None,
        "windowEnd": None,
        "budgetExhausted": None,
        "exhaustionForecast": None,
    }


def test_a_stored_quota_status_reads_back_as_the_write_that_made_it() -> None:
    for write in (QUOTA, replace(QUOTA, budget=BUDGET)):
        # the merge patch's nulls are absent from what is stored
        stored = {k: v for k, v in quota_status_json(write).items() if v is not None}
        assert write.same_as(stored_status("GpuQuota", stored).quota)


def test_a_quota_status_without_a_generation_does_not_compare_the_stored_one() -> None:
    stored = stored_status("GpuQuota", quota_status_json(QUOTA)).quota
    assert replace(QUOTA, observed_generation=None).same_as(stored)
    assert not replace(QUOTA, observed_generation=4).same_as(stored)


def test_a_stored_quota_field_not_as_the_controller_writes_it_is_written_again() -> None:
    stored = quota_status_json(QUOTA) | {"pods": "1"}
    assert stored_status("GpuQuota", stored).quota is None
    assert not QUOTA.same_as(None)
    half_budget = quota_status_json(QUOTA) | {"hoursUsed": 1.0}
    assert stored_status("GpuQuota", half_budget).quota is None


def test_a_gpunode_health_write_sends_every_condition_with_only_the_fields_it_has() -> None:
    write = GpuNodeHealthWrite("Suspect", (AGENTS, HEARTBEAT))
    sent = gpu_node_health_json(write)
    assert sent["health"] == "Suspect"
    assert sent["conditions"][1] == {
        "type": "Heartbeat",
        "status": "False",
        "reason": "Suspect",
        "message": "no heartbeat for 40s",
        "lastTransitionTime": T0,
    }
    assert stored_status("GpuNode", sent).others("Heartbeat") == (AGENTS,)


def test_a_pool_status_write_sends_only_its_parts_and_reads_back() -> None:
    cond = Condition("CardsFragmented", "False", "Compact", "fine", T0, 2)
    full = pool_status_json(PoolStatusWrite(FIELDS, (AGENTS, cond)))
    assert full["fragmentation"] == "3.0%" and full["conditions"][1]["observedGeneration"] == 2
    stored = stored_status("GpuPool", full)
    assert stored.pool == FIELDS and stored.condition("CardsFragmented") == cond
    assert stored.others("CardsFragmented") == (AGENTS,)
    defrag = pool_status_json(PoolStatusWrite(defrag=DefragRecord(T0, 2, 1, "30.0%", "5.0%")))
    assert defrag == {
        "defrag": {
            "lastRound": T0,
            "moves": 2,
            "cleared": 1,
            "fragmentationBefore": "30.0%",
            "fragmentationAfter": "5.0%",
        }
    }


def test_a_condition_without_a_type_or_status_and_a_non_object_status_are_left_out() -> None:
    stored = stored_status("GpuNode", {"conditions": [{"type": "X"}, "junk", {"status": "True"}]})
    assert stored.conditions == ()
    assert stored_status("GpuPool", "junk").pool is None
