"""HAMi's names on the dev cluster with all of gpupool: a Deployment's pod template written for
HAMi (nvidia.com/gpu + gpumem + gpucores, use-gputype) is accepted unchanged, with kubectl
printing the webhook's translation warnings, and its pod runs with the slice it asked for (the
GpuLease holds 3000 MiB); a Deployment's pods, made by the ReplicaSet controller, carry the
translation as an Event on the pod and on the ReplicaSet; a pod of 2 × 50% gets half of each of
two cards; a legacy `nvidia.com/gpu: 1` pod is gated, leased and counted in its tenant's quota,
unless it opts out; a pod mixing HAMi's and gpupool's names, a MIG profile and a timeslice pod
are refused with their messages.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from typing import TYPE_CHECKING, Any

import pytest
from support.builders import pod_json
from support.waiting import wait_until

from gpupool.devcluster.apiclient import KubeApi
from gpupool.domain.units import GiB, MiB

if TYPE_CHECKING:
    from conftest import E2ECluster

pytestmark = pytest.mark.e2e

GPUPOOL_API = "/apis/gpupool.io/v1alpha1"


def _namespace(api: KubeApi, labels: dict[str, str] | None = None) -> str:
    name = f"hami-{secrets.token_hex(3)}"
    api.create(
        "/api/v1/namespaces",
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": labels or {}},
        },
    )
    return name


def _kubectl(c: E2ECluster, ns: str, manifest: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(c.binaries.kubectl), "--kubeconfig", str(c.kubeconfig), "-n", ns, "create", "-f", "-"],
        input=json.dumps(manifest),
        capture_output=True,
        text=True,
        timeout=30,
    )


HAMI_LIMITS = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"}
HAMI_ANNOTATIONS = {"nvidia.com/use-gputype": "A100"}


def _running(api: KubeApi, ns: str, name: str) -> dict[str, Any] | None:
    pod: dict[str, Any] | None = api.find(f"/api/v1/namespaces/{ns}/pods/{name}")
    return pod if pod is not None and pod["status"].get("phase") == "Running" else None


def test_a_hami_deployment_runs_unchanged_with_the_slice_it_asked_for(
    gpupool_cluster: E2ECluster,
) -> None:
    c = gpupool_cluster
    ns = _namespace(c.api)
    # what the ReplicaSet controller would create from the template: the same metadata and spec
    pod = pod_json(
        "infer-0", labels={"app": "infer"}, annotations=HAMI_ANNOTATIONS, limits=HAMI_LIMITS
    )
    template = {
        "metadata": {k: pod["metadata"][k] for k in ("labels", "annotations")},
        "spec": pod["spec"],
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "infer"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "infer"}},
            "template": template,
        },
    }
    created = _kubectl(c, ns, deployment)
    assert created.returncode == 0, created.stderr
    created = _kubectl(c, ns, pod)
    assert created.returncode == 0, created.stderr
    warnings = created.stderr
    assert "nvidia.com/gpumem: 3000 → gpupool.io/gpu-memory: 3000Mi" in warnings, warnings
    assert "nvidia.com/gpucores: 30 → gpupool.io/gpu-compute: 30" in warnings, warnings
    assert "nvidia.com/use-gputype: A100 → gpupool.io/gpu-model: A100-40GB|A100-80GB" in warnings

    running = wait_until(
        lambda: _running(c.api, ns, "infer-0"),
        timeout_s=90,
        what=lambda: f"the HAMi pod to run: {c.api.find(f'/api/v1/namespaces/{ns}/pods/infer-0')}",
    )
    limits = running["spec"]["containers"][0]["resources"]["limits"]
    assert not [k for k in limits if k.startswith("nvidia.com/")], limits
    assert limits["gpupool.io/gpu-memory"] == "3000Mi" and limits["gpupool.io/gpu-compute"] == "30"
    lease = _lease_of(c.api, running)
    [device] = lease["spec"]["devices"]
    assert device["sizeBytes"] == 3000 * MiB
    assert device["model"] == "A100-80GB"
    assert lease["spec"]["node"] == running["spec"]["nodeName"]


@pytest.mark.parametrize(
    ("limits", "annotations", "message"),
    [
        (
            {"nvidia.com/gpumem": "3000", "gpupool.io/gpu-compute": "20"},
            None,
            "the pod mixes HAMi's names (nvidia.com/gpumem) with gpupool's "
            "(gpupool.io/gpu-compute)",
        ),
        (
            {"nvidia.com/gpumem-percentage": "150"},
            None,
            "nvidia.com/gpumem-percentage must be a whole number from 1 to 100",
        ),
        (
            {"gpupool.io/gpu-memory": "4Gi"},
            {"gpupool.io/compute-mode": "timeslice"},
            "gpupool.io/compute-mode: timeslice is not supported: gpupool does not set up "
            "time-slicing",
        ),
        (
            {"nvidia.com/mig-1g.10gb": "1"},
            None,
            "asks for nvidia.com/mig-1g.10gb, an NVIDIA MIG instance; gpupool does not "
            "partition cards with MIG yet",
        ),
    ],
    ids=["mixed", "percentage-over-100", "timeslice", "mig"],
)
def test_refused_with_the_message(
    gpupool_cluster: E2ECluster,
    limits: dict[str, str],
    annotations: dict[str, str] | None,
    message: str,
) -> None:
    c = gpupool_cluster
    ns = _namespace(c.api)
    refused = _kubectl(c, ns, pod_json("refused", limits=limits, annotations=annotations))
    assert refused.returncode != 0
    assert "denied the request" in refused.stderr and message in refused.stderr, refused.stderr
    assert c.api.find(f"/api/v1/namespaces/{ns}/pods/refused") is None


def test_a_pod_opting_out_of_gpupool_keeps_nvidia_gpu(gpupool_cluster: E2ECluster) -> None:
    c = gpupool_cluster
    ns = _namespace(c.api)
    plain = pod_json(
        "plain",
        limits={"nvidia.com/gpu": "1"},
        annotations={"gpupool.io/adopt-nvidia-gpu": "false"},
    )
    created = _kubectl(c, ns, plain)
    try:
        assert created.returncode == 0 and "Warning" not in created.stderr, created.stderr
        stored = c.api.get(f"/api/v1/namespaces/{ns}/pods/plain")
        assert stored["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
        assert not stored["spec"].get("schedulingGates")  # gpupool did not touch it
    finally:
        # Left pending (no node offers nvidia.com/gpu), it would wait for one: a later test
        # that makes a node offer 8 (test_two_paths_e2e) found one taken by it.
        c.api.delete(f"/api/v1/namespaces/{ns}/pods/plain?gracePeriodSeconds=0")


def _lease_of(api: KubeApi, pod: dict[str, Any]) -> dict[str, Any]:
    """The pod's GpuLease; the extender creates it just after the Binding, so wait for it."""
    lease_ns, uid = pod["metadata"]["annotations"]["gpupool.io/lease"].split("/")
    path = f"{GPUPOOL_API}/namespaces/{lease_ns}/gpuleases/{uid}"
    lease: dict[str, Any] = wait_until(lambda: api.find(path), 30, f"the GpuLease {path}")
    return lease


def test_a_legacy_nvidia_gpu_pod_is_gated_leased_and_counted(gpupool_cluster: E2ECluster) -> None:
    c = gpupool_cluster
    ns = _namespace(c.api)
    c.api.patch(
        f"/api/v1/namespaces/{ns}",
        {"metadata": {"labels": {"gpupool.io/tenant": ns}}},
    )
    c.api.create(
        f"{GPUPOOL_API}/gpuquotas",
        {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": "GpuQuota",
            "metadata": {"name": ns},
            "spec": {"nominal": "200Gi"},
        },
    )
    created = _kubectl(c, ns, pod_json("legacy", limits={"nvidia.com/gpu": "1"}))
    assert created.returncode == 0, created.stderr
    assert "nvidia.com/gpu: 1 → gpupool.io/gpu: 1 (a whole card)" in created.stderr
    assert "gpupool serves pods that ask for nvidia.com/gpu" in created.stderr
    stored = c.api.get(f"/api/v1/namespaces/{ns}/pods/legacy")
    assert stored["metadata"]["labels"]["gpupool.io/tenant"] == ns
    running = wait_until(
        lambda: _running(c.api, ns, "legacy"),
        timeout_s=90,
        what=lambda: f"the legacy pod to run: {c.api.find(f'/api/v1/namespaces/{ns}/pods/legacy')}",
    )
    limits = running["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"gpupool.io/gpu": "1", "gpupool.io/vgpu": "1"}, limits
    assert "gpupool.io/admitted" in running["metadata"]["annotations"]  # it was gated
    assert not running["spec"].get("schedulingGates")
    lease = _lease_of(c.api, running)
    [device] = lease["spec"]["devices"]
    gpunode = c.api.get(f"{GPUPOOL_API}/gpunodes/{running['spec']['nodeName']}")
    [card] = [d for d in gpunode["status"]["devices"] if d["uuid"] == device["uuid"]]
    assert device["sizeBytes"] == card["allocatableBytes"]  # the whole card

    def used() -> int | None:
        status = c.api.get(f"{GPUPOOL_API}/gpuquotas/{ns}").get("status") or {}
        value = status.get("usedAmount")
        return int(value) if value else None

    # counted for what it holds: the whole card's bytes
    assert wait_until(used, timeout_s=30, what="the quota to count the pod") == device["sizeBytes"]


def test_a_pod_of_two_halves_gets_half_of_each_of_two_cards(gpupool_cluster: E2ECluster) -> None:
    c = gpupool_cluster
    ns = _namespace(c.api)
    limits = {"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "50"}
    created = _kubectl(c, ns, pod_json("halves", limits=limits))
    assert created.returncode == 0, created.stderr
    assert "gpupool.io/gpu-memory: 40Gi on each of 2 cards (50% of the card's 80Gi)" in (
        created.stderr
    ), created.stderr
    running = wait_until(
        lambda: _running(c.api, ns, "halves"),
        timeout_s=90,
        what=lambda: (
            f"the 2 x 50% pod to run: {c.api.find(f'/api/v1/namespaces/{ns}/pods/halves')}"
        ),
    )
    slices = json.loads(running["metadata"]["annotations"]["gpupool.io/allocation"])
    assert len(slices) == 2, slices
    assert len({s["uuid"] for s in slices}) == 2, slices  # two different cards
    gpunode = c.api.get(f"{GPUPOOL_API}/gpunodes/{running['spec']['nodeName']}")
    total = {d["uuid"]: int(d["memoryBytes"]) for d in gpunode["status"]["devices"]}
    for s in slices:
        assert s["sizeBytes"] == total[s["uuid"]] // 2 == 40 * GiB, slices


def _events(api: KubeApi, ns: str, kind: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = api.get(f"/api/v1/namespaces/{ns}/events")["items"]
    return [
        e
        for e in items
        if e["reason"] == "GpuRequestTranslated"
        and e["involvedObject"]["kind"] == kind
        and e["involvedObject"]["name"] == name
    ]


def test_a_deployments_pod_has_the_translation_as_events_on_it_and_its_replicaset(
    gpupool_cluster: E2ECluster,
) -> None:
    c = gpupool_cluster
    ns = _namespace(c.api)
    template = pod_json("t", labels={"app": "vec"}, limits={"nvidia.com/gpumem": "3000"})
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "vec"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "vec"}},
            "template": {"metadata": {"labels": {"app": "vec"}}, "spec": template["spec"]},
        },
    }
    created = _kubectl(c, ns, deployment)
    assert created.returncode == 0, created.stderr

    def made() -> dict[str, Any] | None:
        pods = c.api.get(f"/api/v1/namespaces/{ns}/pods?labelSelector=app%3Dvec")["items"]
        return pods[0] if pods else None

    pod = wait_until(made, timeout_s=60, what="the ReplicaSet controller to make the pod")
    name = pod["metadata"]["name"]
    [owner] = pod["metadata"]["ownerReferences"]
    assert owner["kind"] == "ReplicaSet"
    stamped = json.loads(pod["metadata"]["annotations"]["gpupool.io/translated"])
    line = "container 'main': HAMi's nvidia.com/gpumem: 3000 → gpupool.io/gpu-memory: 3000Mi"
    assert line in stamped["lines"], stamped
    on_pod = wait_until(
        lambda: _events(c.api, ns, "Pod", name),
        timeout_s=30,
        what=lambda: f"the pod's Event: {c.api.get(f'/api/v1/namespaces/{ns}/events')}",
    )
    on_rs = _events(c.api, ns, "ReplicaSet", owner["name"])
    assert len(on_rs) == 1, on_rs
    assert on_pod[0]["involvedObject"]["uid"] == pod["metadata"]["uid"]
    assert on_rs[0]["involvedObject"]["uid"] == owner["uid"]
    for event in (on_pod[0], on_rs[0]):
        assert line in event["message"], event
