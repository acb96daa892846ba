"""Reclaim of borrowed quota end to end: the real kube-scheduler calls `gpupool extender`, the
`gpupool webhook` gates pods, `gpupool controller` admits them and reclaims borrowed quota.

All three run as processes against one cluster of this module (two kwok nodes with 8 A100-80GB
each), as a user starts them. Tenant beta runs on alpha's idle quota; alpha submits; beta's
newest borrowed pod gets its notice, is evicted through the Eviction API after beta's grace
period (3 s), alpha's pod runs; beta's pods within its guaranteed quota are untouched. A second
test shows a PodDisruptionBudget holding the eviction back until it is removed.
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
    events_with,
    lease_ends_reclaimed,
    lease_of,
    pod_annotations,
    pod_events,
    pod_get,
    pod_running,
    process_stack,
)
from support.builders import pod_json
from support.waiting import wait_until

from gpupool.adapters.wire.times import parse_time
from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.polling import poll_until
from gpupool.domain.units import GiB

pytestmark = pytest.mark.e2e

NOTICE = "gpupool.io/reclaim-notice"
GRACE_S = 3


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with process_stack(tmp_path_factory.mktemp("reclaim-e2e"), "8xA100-80GB", "reclaim") as s:
        yield s


def _quota(
    api: KubeApi, name: str, cohort: str, guaranteed: str = "0", grace_s: int = GRACE_S
) -> None:
    api.create(
        f"{GROUP}/gpuquotas",
        {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": "GpuQuota",
            "metadata": {"name": name},
            "spec": {
                "nominal": "24Gi",
                "guaranteed": guaranteed,
                "cohort": cohort,
                "reclaimGracePeriodSeconds": grace_s,
            },
        },
    )


def _namespace(s: Stack, tenant: str) -> str:
    name = f"rc-{secrets.token_hex(4)}"
    labels = {s.selector[0]: s.selector[1], "gpupool.io/tenant": tenant}
    s.api.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}},
    )
    return name


def _pod(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return pod_json(name, labels=labels or {}, gpu_memory="12Gi", grace_s=0)


def _run_one(s: Stack, ns: str, name: str, labels: dict[str, str] | None = None) -> None:
    s.api.create(f"/api/v1/namespaces/{ns}/pods", _pod(name, labels))
    assert poll_until(lambda: pod_running(s.api, ns, name), timeout_s=60), (
        f"{ns}/{name} not Running: {pod_get(s.api, ns, name)}\n{s.tail()}"
    )


def _borrower_fills_the_pool(
    s: Stack, protected: dict[str, str] | None = None, grace_s: int = GRACE_S
) -> tuple[str, str, str]:
    """Quotas alpha (idle lender) and beta (24Gi guaranteed), one cohort; beta runs b1, b2
    within its quota and b3, b4 on alpha's: the cohort's 48Gi is full. Returns (alpha, its
    namespace, beta's namespace). One pod at a time, so b4 is beta's newest."""
    token = secrets.token_hex(3)
    alpha, beta, cohort = f"alpha-{token}", f"beta-{token}", f"c-{token}"
    _quota(s.api, alpha, cohort)
    _quota(s.api, beta, cohort, guaranteed="24Gi", grace_s=grace_s)
    na, nb = _namespace(s, alpha), _namespace(s, beta)
    for name in ("b1", "b2", "b3", "b4"):
        _run_one(s, nb, name, protected if name == "b4" else None)
    for name, borrowed in (("b1", 0), ("b2", 0), ("b3", 12 * GiB), ("b4", 12 * GiB)):
        pod = pod_get(s.api, nb, name)
        assert pod is not None
        assert json.loads(pod_annotations(pod)["gpupool.io/admitted"])["borrowed"] == borrowed
        uid = pod["metadata"]["uid"]
        lease = lease_of(s, nb, uid)
        assert lease["spec"]["borrowed"] == borrowed, (name, lease["spec"])
    return alpha, na, nb


def test_borrowed_pod_is_noticed_evicted_after_grace_and_the_lender_runs(stack: Stack) -> None:
    api = stack.api
    alpha, na, nb = _borrower_fills_the_pool(stack)
    before = {n: (pod_get(api, nb, n) or {})["metadata"]["uid"] for n in ("b1", "b2", "b3")}
    victim = (pod_get(api, nb, "b4") or {})["metadata"]["uid"]
    api.create(f"/api/v1/namespaces/{na}/pods", _pod("a1"))

    def noticed() -> dict[str, Any] | None:
        pod = pod_get(api, nb, "b4")
        if pod is None:
            return {"gone-before-seen": True}
        text = pod_annotations(pod).get(NOTICE)
        return json.loads(text) if text else None

    notice = poll_until(noticed, timeout_s=30, interval_s=0.1)
    assert notice is not None, stack.tail()
    if "gone-before-seen" not in notice:
        assert notice["claimant"] == alpha and notice["for"] == f"{na}/a1"
        assert notice["evictAt"] > notice["at"]

    assert poll_until(lambda: pod_get(api, nb, "b4") is None, timeout_s=60), stack.tail()
    assert poll_until(lambda: pod_running(api, na, "a1"), timeout_s=60), (
        f"{pod_get(api, na, 'a1')}\n{stack.tail()}"
    )
    ended = lease_ends_reclaimed(stack, nb, victim)
    assert ended["status"]["reclaim"]["reason"] == "QuotaReclaim", ended["status"]
    assert f"give tenant {alpha} its quota back" in ended["status"]["reclaim"]["message"]
    events = events_with(api, nb, "b4", "ReclaimNotice", "Reclaimed")
    reasons = [e["reason"] for e in events]
    assert "ReclaimNotice" in reasons and "Reclaimed" in reasons, reasons
    notice_event = next(e for e in events if e["reason"] == "ReclaimNotice")
    assert f"grace period {GRACE_S}s" in notice_event["message"]
    if "gone-before-seen" not in notice:
        # the eviction is stamped no earlier than the deadline (event times are whole seconds)
        evicted = next(e for e in events if e["reason"] == "Reclaimed")
        stamped, due = parse_time(evicted["lastTimestamp"]), parse_time(notice["evictAt"])
        assert stamped is not None and due is not None and stamped >= int(due), (evicted, notice)
    # beta's other pods (b1, b2 within its guaranteed quota, b3 not needed) are untouched
    for name, uid in before.items():
        pod = pod_running(api, nb, name)
        assert pod is not None and pod["metadata"]["uid"] == uid, name
        assert NOTICE not in pod_annotations(pod), name
        assert not any(e["reason"] == "ReclaimNotice" for e in pod_events(api, nb, name)), name
    a1 = pod_get(api, na, "a1")
    assert a1 is not None
    assert json.loads(pod_annotations(a1)["gpupool.io/admitted"])["borrowed"] == 0


def test_a_pod_disruption_budget_holds_the_eviction_back(stack: Stack) -> None:
    """No disruption controller runs in the dev cluster, so a PDB's status is never computed and
    the Eviction API refuses (429) every pod it covers: the controller says so and retries; once
    the budget is deleted, the eviction goes through and the lender's pod runs."""
    api = stack.api
    protected = {"app": "protected"}
    _, na, nb = _borrower_fills_the_pool(stack, protected)
    api.create(
        f"/apis/policy/v1/namespaces/{nb}/poddisruptionbudgets",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "keep-b4"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": protected}},
        },
    )
    api.create(f"/api/v1/namespaces/{na}/pods", _pod("a1"))

    def blocked() -> str | None:
        pod = pod_get(api, nb, "b4")
        assert pod is not None, "b4 was evicted despite its PodDisruptionBudget"
        notice = json.loads(pod_annotations(pod).get(NOTICE) or "{}")
        return notice.get("blocked") or None

    why = poll_until(blocked, timeout_s=60, interval_s=0.2)
    assert why is not None, stack.tail()

    def blocked_events() -> list[dict[str, Any]] | None:  # the event follows the annotation
        got = [e for e in pod_events(api, nb, "b4") if e["reason"] == "EvictionBlocked"]
        return got or None

    events = poll_until(blocked_events, timeout_s=30, interval_s=0.2)
    assert events and "PodDisruptionBudget" in events[0]["message"], (events, stack.tail())
    assert pod_running(api, nb, "b4") is not None
    a1 = pod_get(api, na, "a1")
    assert a1 is not None and {"name": "gpupool.io/quota"} in a1["spec"]["schedulingGates"]

    api.delete(f"/apis/policy/v1/namespaces/{nb}/poddisruptionbudgets/keep-b4")
    assert poll_until(lambda: pod_get(api, nb, "b4") is None, timeout_s=60), stack.tail()
    assert poll_until(lambda: pod_running(api, na, "a1"), timeout_s=60), stack.tail()
    for name in ("b1", "b2", "b3"):
        assert pod_running(api, nb, name) is not None, name


def test_a_restarted_controller_evicts_at_the_deadline_on_the_pod(stack: Stack) -> None:
    """The controller is stopped right after the notice and started again after the deadline:
    it reads the deadline from the pod, evicts without noticing again, and alpha's pod runs."""
    api = stack.api
    _, na, nb = _borrower_fills_the_pool(stack, grace_s=6)
    api.create(f"/api/v1/namespaces/{na}/pods", _pod("a1"))

    def noticed() -> dict[str, Any] | None:
        pod = pod_get(api, nb, "b4")
        text = pod_annotations(pod).get(NOTICE) if pod else None
        return json.loads(text) if text else None

    notice = poll_until(noticed, timeout_s=30, interval_s=0.1)
    assert notice is not None, stack.tail()
    stack.controller.stop()
    try:
        due = parse_time(notice["evictAt"])
        assert due is not None
        wait_until(lambda: time.time() > due + 1, 30, "the eviction deadline on the pod to pass")
        assert pod_running(api, nb, "b4") is not None, "nothing may evict while no controller runs"
    finally:
        stack.controller.start()
    assert poll_until(lambda: pod_get(api, nb, "b4") is None, timeout_s=60), stack.tail()
    assert poll_until(lambda: pod_running(api, na, "a1"), timeout_s=60), stack.tail()
    reasons = [e["reason"] for e in events_with(api, nb, "b4", "ReclaimNotice", "Reclaimed")]
    assert reasons.count("ReclaimNotice") == 1 and "Reclaimed" in reasons, reasons
    for name in ("b1", "b2", "b3"):
        assert pod_running(api, nb, name) is not None, name
