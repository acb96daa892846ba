"""The autoscaler end to end: the real kube-apiserver, kube-controller-manager (Deployments make
ReplicaSets make pods) and kube-scheduler calling `gpupool extender`, the webhook gating pods and
`gpupool controller` admitting and autoscaling them under its ServiceAccount's RBAC.

The utilisation source is the agent's own /metrics code for each kwok node (`support.fake_agents`:
the agent's collector and refresher over a fake inventory, its leases from the API server as the
agent lists them), the cards driven to a utilisation the test sets. An annotated Deployment with
2 replicas at 95% scales to 4 (its maximum); at 10% nothing happens inside the 30 s cooldown
(set on the object) although the controller reads 10% round after round; after it, the
Deployment scales down to its minimum, 1. A second Deployment with a threshold of 150 gets one
Warning event naming the annotation and is never scaled.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from process_stack import GROUP, Stack, process_stack
from support.builders import pod_json
from support.fake_agents import FakeAgents
from support.waiting import wait_until

from gpupool.adapters.kubeclient import async_client
from gpupool.adapters.kubernetes.lease_source import KubernetesAllocationSource
from gpupool.adapters.kubernetes.node import gpus_from_labels
from gpupool.adapters.wire import names
from gpupool.adapters.wire.times import parse_time

pytestmark = pytest.mark.e2e

COOLDOWN_S = 30


class AgentsThread:
    """FakeAgents on an event loop of their own (the test itself is synchronous)."""

    def __init__(self, stack: Stack, kubeconfig: str) -> None:
        nodes = stack.api.get("/api/v1/nodes")["items"]
        self.cards = {n["metadata"]["name"]: gpus_from_labels(n) for n in nodes}
        self.kubeconfig = kubeconfig
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.agents: FakeAgents | None = None
        self.url = self._call(self._start())

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    async def _start(self) -> str:
        client = async_client(Path(self.kubeconfig), field_manager="e2e-fake-agents")
        self.agents = FakeAgents(self.cards, KubernetesAllocationSource(client))
        return await self.agents.start()

    def set_utilisation(self, pct: float) -> None:
        assert self.agents is not None
        self.loop.call_soon_threadsafe(self.agents.set_utilisation, pct)

    @property
    def scrapes(self) -> int:
        return self.agents.scrapes if self.agents is not None else 0

    def stop(self) -> None:
        if self.agents is not None:
            self._call(self.agents.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with process_stack(tmp_path_factory.mktemp("autoscale-e2e"), "8xA100-80GB", "autoscale") as s:
        yield s


@pytest.fixture(scope="module")
def agents(stack: Stack) -> Iterator[AgentsThread]:
    """The fake agents (listing leases as the controller's identity may), and the controller
    restarted to read them every second."""
    argv = stack.controller.argv
    found = AgentsThread(stack, argv[argv.index("--kubeconfig") + 1])
    stack.controller.stop()
    stack.controller.argv += ["--autoscale-agent-url", found.url, "--autoscale-interval", "1"]
    stack.controller.start()
    try:
        yield found
    finally:
        found.stop()


def _namespace(s: Stack) -> str:
    name = f"as-{secrets.token_hex(4)}"
    labels = {s.selector[0]: s.selector[1], "gpupool.io/tenant": name}
    s.api.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}},
    )
    s.api.create(
        f"{GROUP}/gpuquotas",
        {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": "GpuQuota",
            "metadata": {"name": name},
            "spec": {"nominal": "400Gi"},
        },
    )
    return name


def _deployment(name: str, replicas: int, annotations: dict[str, str]) -> dict[str, Any]:
    pod = pod_json(name, labels={"app": name}, gpu_memory="12Gi", grace_s=0)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": pod["metadata"], "spec": pod["spec"]},
        },
    }


def _get(s: Stack, ns: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = s.api.get(f"/apis/apps/v1/namespaces/{ns}/deployments/{name}")
    return found


def _replicas(s: Stack, ns: str, name: str) -> int:
    return int(_get(s, ns, name)["spec"]["replicas"])


def _last_step(s: Stack, ns: str, name: str) -> dict[str, Any] | None:
    notes = _get(s, ns, name)["metadata"].get("annotations") or {}
    text = notes.get(names.ANN_AUTOSCALE_STATUS)
    last: dict[str, Any] | None = json.loads(text).get("last") if text else None
    return last


def _events(s: Stack, ns: str, name: str) -> list[dict[str, Any]]:
    items = s.api.get(f"/api/v1/namespaces/{ns}/events")["items"]
    return [
        e
        for e in items
        if e["involvedObject"]["name"] == name and e["involvedObject"]["kind"] == "Deployment"
    ]


def _wait_event(s: Stack, ns: str, name: str, reason: str) -> list[dict[str, Any]]:
    def found() -> list[dict[str, Any]] | None:
        return [e for e in _events(s, ns, name) if e["reason"] == reason] or None

    events: list[dict[str, Any]] = wait_until(found, timeout_s=30, what=f"event {reason} on {name}")
    return events


def _running_leased(s: Stack, ns: str, app: str) -> int:
    pods = s.api.get(f"/api/v1/namespaces/{ns}/pods?labelSelector=app%3D{app}")["items"]
    leases = s.api.get(f"{GROUP}/namespaces/{ns}/gpuleases")["items"]
    held = {le["spec"]["podRef"]["name"] for le in leases}
    return sum(
        1 for p in pods if p["status"].get("phase") == "Running" and p["metadata"]["name"] in held
    )


def test_95_percent_scales_2_to_4_then_10_percent_to_the_minimum_after_the_cooldown(
    stack: Stack, agents: AgentsThread
) -> None:
    s = stack
    ns = _namespace(s)
    agents.set_utilisation(95.0)
    annotations = {
        names.ANN_AUTOSCALE: "true",
        names.ANN_AUTOSCALE_MIN: "1",
        names.ANN_AUTOSCALE_MAX: "4",
        names.ANN_AUTOSCALE_COOLDOWN: f"{COOLDOWN_S}s",
    }
    bad = {**annotations, names.ANN_AUTOSCALE_UP: "150"}
    s.api.create(f"/apis/apps/v1/namespaces/{ns}/deployments", _deployment("bad", 2, bad))
    s.api.create(f"/apis/apps/v1/namespaces/{ns}/deployments", _deployment("web", 2, annotations))

    up = wait_until(
        lambda: _last_step(s, ns, "web"),
        timeout_s=120,
        what=lambda: f"a step of web: pods {_running_leased(s, ns, 'web')} running\n{s.tail()}",
    )
    assert (up["from"], up["to"]) == (2, 4), up
    # the record is written first, then the scale, then the event: wait for the last two
    wait_until(lambda: _replicas(s, ns, "web") == 4, timeout_s=30, what="the scale to 4")
    [scaled] = _wait_event(s, ns, "web", "AutoscaledUp")
    assert "2 → 4" in scaled["message"] and "95%" in scaled["message"], scaled["message"]
    up_at = parse_time(up["at"])
    assert up_at is not None

    # 10% from now on: the controller reads it (scrapes), but the cooldown holds the replicas
    agents.set_utilisation(10.0)
    seen = agents.scrapes
    wait_until(lambda: agents.scrapes >= seen + 4, timeout_s=60, what="the controller reading 10%")
    still = _replicas(s, ns, "web")
    if time.time() >= up_at + COOLDOWN_S:
        pytest.fail("the cooldown ended before the check: the machine is too slow for 30 s")
    assert still == 4 and _last_step(s, ns, "web") == up

    down = wait_until(
        lambda: (last := _last_step(s, ns, "web")) and last["to"] < 4 and last,
        timeout_s=COOLDOWN_S + 90,
        what=lambda: f"the step down\n{s.tail()}",
    )
    assert (down["from"], down["to"]) == (4, 1), down
    down_at = parse_time(down["at"])
    assert down_at is not None and down_at >= up_at + COOLDOWN_S
    wait_until(lambda: _replicas(s, ns, "web") == 1, timeout_s=30, what="the scale to 1")
    [lower] = _wait_event(s, ns, "web", "AutoscaledDown")
    assert "4 → 1" in lower["message"] and "10%" in lower["message"], lower["message"]

    # the bad one: told once, never scaled, over all those rounds
    warned = [e for e in _events(s, ns, "bad") if e["reason"] == "AutoscaleInvalid"]
    assert len(warned) == 1 and warned[0]["type"] == "Warning", warned
    assert names.ANN_AUTOSCALE_UP in warned[0]["message"]
    assert _replicas(s, ns, "bad") == 2
