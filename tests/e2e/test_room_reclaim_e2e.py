"""Reclaim *for room* end to end: a lender's pod that the quota admits but no card can take gets
room made on one node by evicting a borrowed pod there.

`gpupool extender`, `gpupool webhook` and `gpupool controller` run as processes against a cluster
of this module: two kwok nodes with one A100-80GB each (72Gi allocatable per card), so the cards
fill long before the quota does. Tenant beta (nominal = guaranteed 60Gi) runs, pinned by
nodeSelector:
  gpu-node-0: b1 (24Gi, within beta's quota), b3 (48Gi, borrowed)
  gpu-node-1: b2 (36Gi, within beta's quota), b4 (36Gi, borrowed, beta's newest)
Tenant alpha (nominal 200Gi, idle) submits a1 (48Gi): the quota admits it (alpha is within its
nominal quota and the cohort's pool has room), kube-scheduler finds no card (Unschedulable). Only
b3's eviction makes room for 48Gi on one card (b4's would leave 36Gi), so b3 gets the notice,
is evicted after beta's grace period, and a1 runs on gpu-node-0; b4 (which a quota reclaim would
have taken first, being the newest) and b1, b2 are untouched. A second test deletes the waiting
pod before the deadline: the notice is withdrawn and b3 keeps running. A third has beta submit q
(40Gi, a higher priority, so kube-scheduler tries it before a1) right after the notice: q fits
only where b3 was, and the room hold that b3's eviction leaves on its GpuLease keeps it off
gpu-node-0 until a1 is bound there.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from process_stack import (
    GROUP,
    LIVE,
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
from support.priority_class import priority_class

from gpupool.adapters.wire.times import parse_time
from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.errors import ApiError
from gpupool.devcluster.polling import poll_until
from gpupool.domain.units import GiB

pytestmark = pytest.mark.e2e

NOTICE = "gpupool.io/reclaim-notice"
NODE_X, NODE_Y = "gpu-node-0", "gpu-node-1"
GRACE_S = 3


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with process_stack(tmp_path_factory.mktemp("room-reclaim-e2e"), "1xA100-80GB", "room") as s:
        yield s


@pytest.fixture
def room(stack: Stack) -> Iterator[Stack]:
    """The stack, emptied again after the test: its pods deleted and their leases released, so
    the next test finds both cards free."""
    yield stack
    api = stack.api
    for ns in stack.namespaces:
        for pod in api.get(f"/api/v1/namespaces/{ns}/pods")["items"]:
            try:
                api.delete(f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}")
            except ApiError as err:
                if err.status != 404:
                    raise

    def released() -> bool:
        for ns in stack.namespaces:
            if api.get(f"/api/v1/namespaces/{ns}/pods")["items"]:
                return False
            for lease in api.get(f"{GROUP}/namespaces/{ns}/gpuleases")["items"]:
                if (lease.get("status") or {}).get("phase") in LIVE:
                    return False
        return True

    assert poll_until(released, timeout_s=60, interval_s=0.2), stack.tail()
    stack.namespaces.clear()


def _quota(api: KubeApi, name: str, cohort: str, nominal: str, guaranteed: str, grace: int) -> None:
    api.create(
        f"{GROUP}/gpuquotas",
        {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": "GpuQuota",
            "metadata": {"name": name},
            "spec": {
                "nominal": nominal,
                "guaranteed": guaranteed,
                "cohort": cohort,
                "reclaimGracePeriodSeconds": grace,
            },
        },
    )


def _namespace(s: Stack, tenant: str) -> str:
    name = f"rr-{secrets.token_hex(4)}"
    labels = {s.selector[0]: s.selector[1], "gpupool.io/tenant": tenant}
    s.api.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}},
    )
    s.namespaces.append(name)
    return name


def _pod(
    name: str, memory: str, node: str | None = None, priority_class: str | None = None
) -> dict[str, Any]:
    return pod_json(
        name, gpu_memory=memory, hostname=node, priority_class=priority_class, grace_s=0
    )


def _unschedulable(api: KubeApi, ns: str, name: str) -> dict[str, Any] | None:
    pod = pod_get(api, ns, name)
    for cond in (pod or {}).get("status", {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
            return dict(cond)
    return None


def _full_cards(s: Stack, grace: int) -> tuple[str, str, str]:
    """Quotas alpha (idle lender, nominal 200Gi) and beta (nominal = guaranteed 60Gi), one
    cohort; beta's pods fill both cards (see the module docstring), one at a time so b4 is
    beta's newest. Returns (alpha, its namespace, beta's namespace)."""
    token = secrets.token_hex(3)
    alpha, beta, cohort = f"alpha-{token}", f"beta-{token}", f"c-{token}"
    _quota(s.api, alpha, cohort, "200Gi", "0", grace)
    _quota(s.api, beta, cohort, "60Gi", "60Gi", grace)
    na, nb = _namespace(s, alpha), _namespace(s, beta)
    layout = (("b1", "24Gi", NODE_X), ("b2", "36Gi", NODE_Y), ("b3", "48Gi", NODE_X),
              ("b4", "36Gi", NODE_Y))  # fmt: skip
    for name, memory, node in layout:
        s.api.create(f"/api/v1/namespaces/{nb}/pods", _pod(name, memory, node))
        assert poll_until(lambda n=name: pod_running(s.api, nb, n), timeout_s=60), (
            f"{nb}/{name} not Running: {pod_get(s.api, nb, name)}\n{s.tail()}"
        )
    for name, borrowed in (("b1", 0), ("b2", 0), ("b3", 48 * GiB), ("b4", 36 * GiB)):
        pod = pod_get(s.api, nb, name)
        assert pod is not None
        assert json.loads(pod_annotations(pod)["gpupool.io/admitted"])["borrowed"] == borrowed
        lease = lease_of(s, nb, pod["metadata"]["uid"])
        assert lease["spec"]["borrowed"] == borrowed, (name, lease["spec"])
    return alpha, na, nb


def _waits_for_room(s: Stack, na: str) -> None:
    """a1 is admitted by quota (gate removed, not borrowed) and refused by kube-scheduler."""
    api = s.api
    api.create(f"/api/v1/namespaces/{na}/pods", _pod("a1", "48Gi"))
    assert poll_until(lambda: _unschedulable(api, na, "a1"), timeout_s=30), (
        f"{pod_get(api, na, 'a1')}\n{s.tail()}"
    )
    a1 = pod_get(api, na, "a1")
    assert a1 is not None and not a1["spec"].get("schedulingGates"), a1
    assert json.loads(pod_annotations(a1)["gpupool.io/admitted"])["borrowed"] == 0


def _notice_on(api: KubeApi, ns: str, name: str) -> dict[str, Any] | None:
    pod = pod_get(api, ns, name)
    text = pod_annotations(pod).get(NOTICE) if pod else None
    return json.loads(text) if text else None


def test_a_borrowed_pod_on_the_node_that_can_fit_the_pod_is_evicted_for_room(room: Stack) -> None:
    api = room.api
    alpha, na, nb = _full_cards(room, GRACE_S)
    before = {n: (pod_get(api, nb, n) or {})["metadata"]["uid"] for n in ("b1", "b2", "b4")}
    victim = (pod_get(api, nb, "b3") or {})["metadata"]["uid"]
    _waits_for_room(room, na)

    notice = poll_until(lambda: _notice_on(api, nb, "b3"), timeout_s=30, interval_s=0.1)
    assert notice is not None, room.tail()
    assert notice["claimant"] == alpha and notice["for"] == f"{na}/a1", notice
    assert notice["room"] == NODE_X, notice
    assert notice["evictAt"] > notice["at"]

    assert poll_until(lambda: pod_get(api, nb, "b3") is None, timeout_s=60), room.tail()
    a1 = poll_until(lambda: pod_running(api, na, "a1"), timeout_s=60)
    assert a1 is not None, f"{pod_get(api, na, 'a1')}\n{room.tail()}"
    assert a1["spec"]["nodeName"] == NODE_X
    ended = lease_ends_reclaimed(room, nb, victim)
    assert ended["status"]["reclaim"]["reason"] == "RoomReclaim", ended["status"]
    assert f"room on node {NODE_X} for pod {na}/a1" in ended["status"]["reclaim"]["message"]

    def with_reclaimed() -> list[dict[str, Any]] | None:  # events follow what they report
        got = pod_events(api, nb, "b3")
        return got if any(e["reason"] == "Reclaimed" for e in got) else None

    events = poll_until(with_reclaimed, timeout_s=30, interval_s=0.2) or pod_events(api, nb, "b3")
    reasons = [e["reason"] for e in events]
    assert reasons.count("ReclaimNotice") == 1 and "Reclaimed" in reasons, reasons
    noticed = next(e for e in events if e["reason"] == "ReclaimNotice")
    assert f"room on node {NODE_X} for pod {na}/a1" in noticed["message"], noticed["message"]
    assert f"grace period {GRACE_S}s" in noticed["message"]
    evicted = next(e for e in events if e["reason"] == "Reclaimed")
    stamped, due = parse_time(evicted["lastTimestamp"]), parse_time(notice["evictAt"])
    assert stamped is not None and due is not None and stamped >= int(due), (evicted, notice)
    # b1, b2 (within beta's quota) and b4 (borrowed, but no room for a1 on its node) untouched
    for name, uid in before.items():
        pod = pod_running(api, nb, name)
        assert pod is not None and pod["metadata"]["uid"] == uid, name
        assert NOTICE not in pod_annotations(pod), name
        assert not any(e["reason"] == "ReclaimNotice" for e in pod_events(api, nb, name)), name


def test_the_notice_is_withdrawn_when_the_waiting_pod_goes(room: Stack) -> None:
    api = room.api
    _, na, nb = _full_cards(room, grace=60)
    b3_uid = (pod_get(api, nb, "b3") or {})["metadata"]["uid"]
    _waits_for_room(room, na)
    notice = poll_until(lambda: _notice_on(api, nb, "b3"), timeout_s=30, interval_s=0.1)
    assert notice is not None and notice["room"] == NODE_X, room.tail()

    api.delete(f"/api/v1/namespaces/{na}/pods/a1")
    assert poll_until(lambda: _notice_on(api, nb, "b3") is None, timeout_s=30), room.tail()
    b3 = pod_running(api, nb, "b3")
    assert b3 is not None and b3["metadata"]["uid"] == b3_uid
    events = events_with(api, nb, "b3", "ReclaimWithdrawn")
    withdrawn = [e for e in events if e["reason"] == "ReclaimWithdrawn"]
    # the round may see a1 still terminating (deletionTimestamp set) or already gone
    why = withdrawn[0]["message"] if withdrawn else ""
    assert "the pod is gone" in why or "is being deleted" in why, withdrawn


def _priority_class(api: KubeApi) -> str:
    """A higher priority that never preempts: kube-scheduler tries its pods first, evicts none."""
    return priority_class(api, f"first-{secrets.token_hex(3)}", 1000)


def _reclaim_of(api: KubeApi, ns: str, uid: str) -> dict[str, Any]:
    lease = api.get(f"{GROUP}/namespaces/{ns}/gpuleases/{uid}")
    return dict((lease.get("status") or {}).get("reclaim") or {})


def test_the_room_made_is_held_for_the_pod_it_was_made_for(room: Stack) -> None:
    api = room.api
    _, na, nb = _full_cards(room, GRACE_S)
    victim = (pod_get(api, nb, "b3") or {})["metadata"]["uid"]
    _waits_for_room(room, na)
    a1_uid = (pod_get(api, na, "a1") or {})["metadata"]["uid"]
    notice = poll_until(lambda: _notice_on(api, nb, "b3"), timeout_s=30, interval_s=0.1)
    assert notice is not None and notice["room"] == NODE_X, room.tail()

    # q: beta's (borrowed), 40Gi: fits only on gpu-node-0 once b3 is gone; tried before a1
    api.create(
        f"/api/v1/namespaces/{nb}/pods", _pod("q", "40Gi", priority_class=_priority_class(api))
    )
    q_nodes: set[str] = set()
    holds: set[str] = set()

    def a1_bound() -> str | None:
        holds.add(_reclaim_of(api, nb, victim).get("holdUntil") or "")
        q = pod_get(api, nb, "q")
        q_node = (q or {}).get("spec", {}).get("nodeName")
        if q_node:
            q_nodes.add(q_node)
        a1 = pod_get(api, na, "a1")
        node = (a1 or {}).get("spec", {}).get("nodeName")
        return str(node) if node else None

    placed = poll_until(a1_bound, timeout_s=90, interval_s=0.1)
    assert NODE_X not in q_nodes, f"q took the room made for a1\n{room.tail()}"
    assert placed == NODE_X, f"{pod_get(api, na, 'a1')}\n{pod_get(api, nb, 'q')}\n{room.tail()}"
    q = pod_get(api, nb, "q")
    assert q is not None and not q["spec"].get("schedulingGates"), q  # admitted, so it was tried
    assert not q["spec"].get("nodeName"), q  # no room anywhere now: it waits
    assert _unschedulable(api, nb, "q") is not None, q

    # the hold on b3's lease was written at the eviction, and removed once a1 was placed
    record = _reclaim_of(api, nb, victim)
    assert record["reason"] == "RoomReclaim", record
    [until] = [parse_time(h) for h in holds if h]  # one holdUntil, seen while a1 waited
    evicted = parse_time(record["at"])
    assert until is not None and evicted is not None and abs(until - evicted - 300) < 0.01, record
    assert (record["room"], record["for"], record["forUid"]) == (NODE_X, f"{na}/a1", a1_uid)
    assert poll_until(lambda: "holdUntil" not in _reclaim_of(api, nb, victim), timeout_s=30), (
        f"{_reclaim_of(api, nb, victim)}\n{room.tail()}"
    )
