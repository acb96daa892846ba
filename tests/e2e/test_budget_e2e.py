"""GiB-hour budgets end to end: the real kube-scheduler calls `gpupool extender`, the webhook
gates pods, `gpupool controller` meters the GpuLeases and admits by the budget.

A tenant with a 60 s window and a budget of 0.004 GiB-hours (a 12Gi pod spends it in 1.2 s):
its first pod runs and spends the budget; the controller writes the GpuQuota status (hours used,
remaining, the window, exhausted); a second pod then waits at the gate with the budget as its
reason in `gpupool.io/queue` and a `Queued` event; once the first pod is gone and the next window
starts, the second pod is admitted and runs, and the status shows the new window.

A tenant whose quota says `onExhaustion: drain` (same budget, a 3 s grace period): its running pod
spends the budget, gets the drain notice and a `BudgetDrain` event, is evicted through the Eviction
API after its grace (`BudgetDrained`), and its GpuLease ends Released (reason BudgetDrained) with
its GiB-hours metered; a pod submitted meanwhile waits at the gate.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest
from process_stack import (
    GROUP,
    Stack,
    pod_annotations,
    pod_events,
    pod_get,
    pod_running,
    process_stack,
)
from support.builders import pod_json
from support.waiting import wait_until

from gpupool.adapters.wire.times import parse_time
from gpupool.devcluster.polling import poll_until

pytestmark = pytest.mark.e2e

WINDOW_S = 60
LIMIT_HOURS = 0.004


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with process_stack(tmp_path_factory.mktemp("budget-e2e"), "8xA100-80GB", "budget") as s:
        yield s


def _quota(s: Stack, name: str, on_exhaustion: str = "block", grace_s: int = 30) -> None:
    s.api.create(
        f"{GROUP}/gpuquotas",
        {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": "GpuQuota",
            "metadata": {"name": name},
            "spec": {
                "nominal": "48Gi",
                "budget": {
                    "limitHours": LIMIT_HOURS,
                    "windowSeconds": WINDOW_S,
                    "onExhaustion": on_exhaustion,
                },
                "reclaimGracePeriodSeconds": grace_s,
            },
        },
    )


def _namespace(s: Stack, tenant: str) -> str:
    name = f"bu-{secrets.token_hex(4)}"
    labels = {s.selector[0]: s.selector[1], "gpupool.io/tenant": tenant}
    s.api.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}},
    )
    return name


def _status(s: Stack, name: str) -> dict[str, Any]:
    return dict(s.api.get(f"{GROUP}/gpuquotas/{name}").get("status") or {})


def test_a_spent_budget_blocks_a_new_pod_until_the_next_window(stack: Stack) -> None:
    api = stack.api
    tenant = f"bud-{secrets.token_hex(3)}"
    _quota(stack, tenant)
    ns = _namespace(stack, tenant)
    # start early in a window, so the first pod spends this window's budget well before it ends
    wait_until(lambda: time.time() % WINDOW_S < 15, WINDOW_S + 5, "the start of a budget window")
    api.create(f"/api/v1/namespaces/{ns}/pods", pod_json("p1", gpu_memory="12Gi", grace_s=0))
    assert poll_until(lambda: pod_running(api, ns, "p1"), timeout_s=30), stack.tail()

    spent = poll_until(lambda: _status(stack, tenant).get("budgetExhausted") is True, timeout_s=20)
    assert spent, (_status(stack, tenant), stack.tail())
    status = _status(stack, tenant)
    assert status["hoursUsed"] >= LIMIT_HOURS and status["hoursRemaining"] == 0
    assert status["hoursUnit"] == "GiB-hours" and status["hoursPerHour"] == 12
    start, end = parse_time(status["windowStart"]), parse_time(status["windowEnd"])
    assert start is not None and end == start + WINDOW_S and start % WINDOW_S == 0

    api.create(f"/api/v1/namespaces/{ns}/pods", pod_json("p2", gpu_memory="12Gi", grace_s=0))

    def blocked() -> str | None:
        note = pod_annotations(pod_get(api, ns, "p2") or {}).get("gpupool.io/queue")
        return note if note and "GiB-hours this window" in note else None

    note = poll_until(blocked, timeout_s=20)
    assert note is not None, (pod_get(api, ns, "p2"), stack.tail())
    assert f"of {LIMIT_HOURS:g} GiB-hours this window (on exhaustion: block)" in note
    p2 = pod_get(api, ns, "p2")
    assert p2 is not None and {"name": "gpupool.io/quota"} in p2["spec"]["schedulingGates"]
    assert poll_until(
        lambda: any(
            e["reason"] == "Queued" and "GiB-hours this window" in e["message"]
            for e in pod_events(api, ns, "p2")
        ),
        timeout_s=30,
    ), pod_events(api, ns, "p2")

    api.delete(f"/api/v1/namespaces/{ns}/pods/p1")
    assert poll_until(lambda: pod_running(api, ns, "p2"), timeout_s=WINDOW_S + 30), (
        pod_get(api, ns, "p2"),
        stack.tail(),
    )
    later = _status(stack, tenant)
    later_start = parse_time(later["windowStart"])
    assert later_start is not None and later_start >= end, (later, status)


def test_a_spent_drain_budget_evicts_the_running_pod_after_its_grace(stack: Stack) -> None:
    api = stack.api
    tenant = f"dra-{secrets.token_hex(3)}"
    _quota(stack, tenant, "drain", grace_s=3)
    ns = _namespace(stack, tenant)
    wait_until(lambda: time.time() % WINDOW_S < 15, WINDOW_S + 5, "the start of a budget window")
    api.create(f"/api/v1/namespaces/{ns}/pods", pod_json("d1", gpu_memory="12Gi", grace_s=0))
    assert poll_until(lambda: pod_running(api, ns, "d1"), timeout_s=30), stack.tail()
    uid = (pod_get(api, ns, "d1") or {})["metadata"]["uid"]

    def noticed() -> dict[str, Any] | None:
        raw = pod_annotations(pod_get(api, ns, "d1") or {}).get("gpupool.io/drain-notice")
        return json.loads(raw) if raw else None

    notice = poll_until(noticed, timeout_s=20)
    assert notice is not None, (pod_get(api, ns, "d1"), stack.tail())
    assert notice["claimant"] == tenant and notice["for"] == f"{ns}/d1"
    at, evict_at = parse_time(notice["at"]), parse_time(notice["evictAt"])
    assert at is not None and evict_at == at + 3, notice
    api.create(f"/api/v1/namespaces/{ns}/pods", pod_json("d2", gpu_memory="12Gi", grace_s=0))

    assert poll_until(lambda: pod_get(api, ns, "d1") is None, timeout_s=30), stack.tail()

    # the eviction's event is written after the Eviction call returns: the pod may be gone first
    def both_events() -> list[str] | None:
        reasons = [e["reason"] for e in pod_events(api, ns, "d1")]
        return reasons if {"BudgetDrain", "BudgetDrained"} <= set(reasons) else None

    assert poll_until(both_events, timeout_s=15), [e["reason"] for e in pod_events(api, ns, "d1")]

    def ended() -> dict[str, Any] | None:
        lease = api.get(f"{GROUP}/namespaces/{ns}/gpuleases/{uid}")
        status: dict[str, Any] = lease.get("status") or {}
        return status if status.get("phase") == "Released" else None

    status = poll_until(ended, timeout_s=30)
    assert status is not None, stack.tail()
    assert status["reclaim"]["reason"] == "BudgetDrain", status
    condition = next(c for c in status["conditions"] if c["type"] == "Released")
    assert condition["reason"] == "BudgetDrained", condition
    assert status["gibHours"] >= LIMIT_HOURS, status  # metered through the grace period
    end = parse_time(status["end"])
    assert end is not None and end >= evict_at, status

    def waits() -> str | None:  # submitted while the window is spent: it waits at the gate
        note = pod_annotations(pod_get(api, ns, "d2") or {}).get("gpupool.io/queue")
        return note if note and "(on exhaustion: drain)" in note else None

    assert poll_until(waits, timeout_s=20), (pod_get(api, ns, "d2"), stack.tail())
    d2 = pod_get(api, ns, "d2")
    assert d2 is not None and {"name": "gpupool.io/quota"} in d2["spec"]["schedulingGates"], d2
