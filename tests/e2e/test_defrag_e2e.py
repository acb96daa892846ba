"""Live defragmentation end to end: a fragmented card is cleared so that a large pod runs.

`gpupool extender`, `gpupool webhook` and `gpupool controller` run as processes against a cluster
of this module: three kwok nodes with one A100-80GB each (72Gi allocatable per card); the dev
cluster runs kube-controller-manager, so Deployments recreate the pods defragmentation evicts and
the disruption controller fills in PodDisruptionBudgets' `disruptionsAllowed`. The layout (each
Deployment placed while the other nodes are cordoned):
  gpu-node-0: Deployments `low` (1 × 8Gi, priority 10) and `mid` (1 × 8Gi, priority 20)
  gpu-node-1: Deployment `guarded`, 2 × 8Gi, priority 5, under a PodDisruptionBudget that allows
              no disruption
  gpu-node-2: pod `solo`, 16Gi, exclusive (gpupool.io/exclusive), priority 0
Each card has 56Gi free; `large` (60Gi) fits on none and waits, Unschedulable. With the common
sizes 8Gi, 16Gi and 60Gi every card is 13% fragmented. `gpupool defrag plan` (live, threshold 10)
then shows: gpu-node-1 is tried first (its priority is the lowest) but kept for its budget,
gpu-node-2 is kept for its exclusive pod, gpu-node-0 is fixed by one move, its lowest-priority
slice (`low`'s pod: 64Gi free then, room for `large`). A GpuPool with `spec.defrag.enabled`
makes the controller do it: gpu-node-0's card is marked (GpuNode annotation), low's pod gets the
notice naming `large`, is evicted after the buffer time, its Deployment recreates it elsewhere
(the marked card takes no new slice, and the room hold keeps the node for `large`), `large` runs
on gpu-node-0 beside mid's pod, the mark is released, and mid's, guarded's and solo's pods are
untouched. A second test: settings the schema cannot refuse (a
timeout shorter than the notice) give a False condition and move nothing; a threshold over 100
is refused by the API server.
"""

from __future__ import annotations

import functools
import json
import secrets
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from process_stack import (
    GPUPOOL,
    GROUP,
    Stack,
    pod_annotations,
    pod_get,
    process_stack,
    stop_process,
)
from support.builders import pod_json
from support.priority_class import priority_class

from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.errors import ApiError
from gpupool.devcluster.polling import poll_until

pytestmark = pytest.mark.e2e

NOTICE = "gpupool.io/defrag-notice"
MARK = "gpupool.io/defrag"
NODES = ("gpu-node-0", "gpu-node-1", "gpu-node-2")
BUFFER_S = 2


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The stack, with the fake node agents' GpuNodes heartbeating (`gpupool dev-cluster
    heartbeat`, as `dev-cluster up` runs it): a mark lives on a node's GpuNode."""
    root = tmp_path_factory.mktemp("defrag-e2e")
    with (
        process_stack(root, "1xA100-80GB", "defrag", nodes=3) as s,
        (root / "heartbeat.log").open("wb") as log,
    ):
        beat = subprocess.Popen(
            [GPUPOOL, "dev-cluster", "heartbeat", "--kubeconfig", s.kubeconfig, "--interval", "5"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            assert poll_until(
                lambda: len(s.api.get(f"{GROUP}/gpunodes")["items"]) == len(NODES), timeout_s=60
            ), (root / "heartbeat.log").read_text()
            yield s
        finally:
            stop_process(beat)


def _cordon(api: KubeApi, node: str, on: bool) -> None:
    api.patch(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": on or None}})


def _only(api: KubeApi, node: str) -> None:
    for n in NODES:
        _cordon(api, n, n != node)


def _priority_class(api: KubeApi, value: int) -> str:
    return priority_class(api, f"dg-{value}-{secrets.token_hex(3)}", value)


def _namespace(s: Stack, tenant: str) -> str:
    name = f"dg-{secrets.token_hex(4)}"
    labels = {s.selector[0]: s.selector[1], "gpupool.io/tenant": tenant}
    s.api.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}},
    )
    s.namespaces.append(name)
    return name


def _deployment(api: KubeApi, ns: str, name: str, priority_class: str, replicas: int) -> None:
    template = pod_json(name, gpu_memory="8Gi", priority_class=priority_class, grace_s=0,
                        labels={"app": name})  # fmt: skip
    template.pop("apiVersion")
    template.pop("kind")
    template["metadata"].pop("name")
    api.create(
        f"/apis/apps/v1/namespaces/{ns}/deployments",
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
         "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                  "template": template}},
    )  # fmt: skip


def _pods_of(api: KubeApi, ns: str, app: str) -> list[dict[str, Any]]:
    items = api.get(f"/api/v1/namespaces/{ns}/pods?labelSelector=app%3D{app}")["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def _running_on(api: KubeApi, ns: str, app: str, count: int) -> dict[str, str] | None:
    """uid -> node of the app's pods once `count` of them run (None before)."""
    pods = [p for p in _pods_of(api, ns, app) if (p.get("status") or {}).get("phase") == "Running"]
    if len(pods) != count:
        return None
    return {p["metadata"]["uid"]: p["spec"]["nodeName"] for p in pods}


def _unschedulable(api: KubeApi, ns: str, name: str) -> bool:
    pod = pod_get(api, ns, name) or {}
    return any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


def _fragmented(s: Stack) -> tuple[str, dict[str, dict[str, str]], str]:
    """The layout of the module docstring; returns (namespace, each Deployment's pods (uid ->
    node), solo's uid)."""
    api = s.api
    tenant = f"t-{secrets.token_hex(3)}"
    api.create(
        f"{GROUP}/gpuquotas",
        {"apiVersion": "gpupool.io/v1alpha1", "kind": "GpuQuota", "metadata": {"name": tenant},
         "spec": {"nominal": "400Gi"}},
    )  # fmt: skip
    ns = _namespace(s, tenant)
    lowest, low, mid = (_priority_class(api, v) for v in (5, 10, 20))
    placed: dict[str, dict[str, str]] = {}
    try:
        _only(api, NODES[0])
        _deployment(api, ns, "low", low, 1)
        _deployment(api, ns, "mid", mid, 1)
        for app in ("low", "mid"):
            got = poll_until(functools.partial(_running_on, api, ns, app, 1), timeout_s=90)
            assert got is not None and set(got.values()) == {NODES[0]}, s.tail()
            placed[app] = got
        _only(api, NODES[1])
        api.create(
            f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
            {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
             "metadata": {"name": "guarded"},
             "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "guarded"}}}},
        )  # fmt: skip
        _deployment(api, ns, "guarded", lowest, 2)
        guarded = poll_until(lambda: _running_on(api, ns, "guarded", 2), timeout_s=90)
        assert guarded is not None and set(guarded.values()) == {NODES[1]}, s.tail()
        placed["guarded"] = guarded
        _only(api, NODES[2])
        solo = pod_json("solo", gpu_memory="16Gi", grace_s=0, labels={"app": "solo"},
                        annotations={"gpupool.io/exclusive": "true"})  # fmt: skip
        api.create(f"/api/v1/namespaces/{ns}/pods", solo)
        alone = poll_until(lambda: _running_on(api, ns, "solo", 1), timeout_s=90)
        assert alone is not None and set(alone.values()) == {NODES[2]}, s.tail()
    finally:
        for n in NODES:
            _cordon(api, n, False)
    api.create(f"/api/v1/namespaces/{ns}/pods", pod_json("large", gpu_memory="60Gi", grace_s=0))
    assert poll_until(lambda: _unschedulable(api, ns, "large"), timeout_s=60), s.tail()
    return ns, placed, next(iter(alone))


def _pool(api: KubeApi, name: str, threshold: int, **defrag: Any) -> None:
    api.create(
        f"{GROUP}/gpupools",
        {"apiVersion": "gpupool.io/v1alpha1", "kind": "GpuPool", "metadata": {"name": name},
         "spec": {"defragThresholdPercent": threshold,
                  "defrag": {"enabled": True, "intervalSeconds": 5, "noticeSeconds": BUFFER_S,
                             "timeoutSeconds": 120, **defrag}}},
    )  # fmt: skip


def _condition(api: KubeApi, pool: str) -> dict[str, Any] | None:
    status = api.get(f"{GROUP}/gpupools/{pool}").get("status") or {}
    return next((c for c in status.get("conditions") or () if c["type"] == "Defragmentation"), None)


def _mark(api: KubeApi, node: str) -> str | None:
    annotations = api.get(f"{GROUP}/gpunodes/{node}")["metadata"].get("annotations") or {}
    return annotations.get(MARK)


def test_the_fragmented_card_is_fixed_and_the_large_pod_runs(stack: Stack) -> None:
    api = stack.api
    ns, placed, solo = _fragmented(stack)
    (low_uid,) = placed["low"]

    dry = subprocess.run(
        [GPUPOOL, "defrag", "plan", "--threshold", "10", "--kubeconfig", stack.kubeconfig,
         "-o", "json"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert [(m["from"]["node"], m["priority"]) for m in plan["moves"]] == [(NODES[0], 10)], plan
    assert plan["moves"][0]["pod"].startswith(f"{ns}/low-"), plan
    kept = {k["node"]: k["reason"] for k in plan["kept"]}
    assert kept.get(NODES[1]) == "disruption_budget" and kept.get(NODES[2]) == "exclusive", plan
    assert plan["held_for"] == [{"node": NODES[0], "card": 0, "pod": f"{ns}/large"}], plan
    assert plan["pool_fragmentation_pct_after"] < plan["pool_fragmentation_pct_before"], plan

    pool = f"pool-{secrets.token_hex(3)}"
    _pool(api, pool, 10)
    mark = poll_until(lambda: _mark(api, NODES[0]), timeout_s=30, interval_s=0.2)
    assert mark is not None and json.loads(mark)["pool"] == pool, stack.tail()
    assert _mark(api, NODES[1]) is None and _mark(api, NODES[2]) is None

    large = poll_until(
        lambda: (p := pod_get(api, ns, "large")) and p["status"].get("phase") == "Running" and p,
        timeout_s=120,
    )
    assert large, f"{pod_get(api, ns, 'large')}\n{stack.tail()}"
    assert large["spec"]["nodeName"] == NODES[0]
    # low's pod was moved: a new one runs, not on gpu-node-0
    moved = poll_until(
        lambda: (r := _running_on(api, ns, "low", 1)) and low_uid not in r and r, timeout_s=90
    )
    assert isinstance(moved, dict) and NODES[0] not in set(moved.values()), stack.tail()
    assert poll_until(lambda: _mark(api, NODES[0]) is None, timeout_s=60), stack.tail()
    # mid (a higher priority: one move was enough), guarded (its budget forbids it) and solo
    # (exclusive) were never touched
    for app in ("mid", "guarded"):
        assert _running_on(api, ns, app, len(placed[app])) == placed[app], app
    for pod in [*_pods_of(api, ns, "mid"), *_pods_of(api, ns, "guarded"),
                *_pods_of(api, ns, "solo")]:  # fmt: skip
        assert NOTICE not in pod_annotations(pod), pod["metadata"]["name"]
    assert set(_running_on(api, ns, "solo", 1) or {}) == {solo}

    def with_moved() -> list[dict[str, Any]] | None:  # events follow what they report
        got: list[dict[str, Any]] = api.get(f"/api/v1/namespaces/{ns}/events")["items"]
        return got if any(e["reason"] == "DefragMoved" for e in got) else None

    events = poll_until(with_moved, timeout_s=30, interval_s=0.2) or []
    reasons = [e["reason"] for e in events if e["involvedObject"]["name"].startswith("low-")]
    assert reasons.count("DefragNotice") == 1 and reasons.count("DefragMoved") == 1, reasons
    noticed = next(e for e in events if e["reason"] == "DefragNotice")
    assert f"GpuPool {pool}" in noticed["message"] and f"{ns}/large" in noticed["message"]
    assert not [e for e in events if e["reason"] == "DefragNotice"
                and not e["involvedObject"]["name"].startswith("low-")]  # fmt: skip

    def released() -> list[dict[str, Any]] | None:
        got = [e for e in api.get("/api/v1/namespaces/default/events")["items"]
               if e["involvedObject"].get("name") == pool]  # fmt: skip
        return got if any(e["reason"] == "DefragReleased" for e in got) else None

    pool_events = poll_until(released, timeout_s=30, interval_s=0.2) or []
    assert {"DefragRound", "DefragReleased"} <= {e["reason"] for e in pool_events}, pool_events
    condition = _condition(api, pool)
    assert condition is not None and condition["status"] == "True", condition
    api.delete(f"{GROUP}/gpupools/{pool}")


def test_bad_settings_are_refused_or_reported_and_nothing_moves(stack: Stack) -> None:
    api = stack.api
    with pytest.raises(ApiError) as refused:
        _pool(api, f"bad-{secrets.token_hex(3)}", 120)
    assert refused.value.status == 422 and "defragThresholdPercent" in str(refused.value)

    pool = f"odd-{secrets.token_hex(3)}"
    _pool(api, pool, 0, noticeSeconds=60, timeoutSeconds=30)
    condition = poll_until(lambda: _condition(api, pool), timeout_s=30, interval_s=0.2)
    assert condition is not None and condition["status"] == "False", stack.tail()
    assert condition["reason"] == "InvalidSpec"
    assert "timeoutSeconds (30) must be longer than noticeSeconds (60)" in condition["message"]
    assert all(_mark(api, n) is None for n in NODES)
    api.delete(f"{GROUP}/gpupools/{pool}")
