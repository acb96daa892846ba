"""HAMi's names on the dev cluster with all of gpupool: a Deployment's pod template written for
HAMi (nvidia.com/gpu + gpumem + gpucores, use-gputype) is accepted unchanged, with kubectl
printing the webhook's translation warnings, and its pod runs with the slice it asked for (the
GpuLease holds 3000 MiB); a pod mixing HAMi's and gpupool's names and a timeslice pod are
refused with their messages.

The cluster has no kube-controller-manager, so the test creates the Deployment (the API server
admits its template as written) and then, through kubectl as a user would, the pod its
ReplicaSet would create from that template.
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
from gpupool.domain.units import MiB

if TYPE_CHECKING:
    from conftest import E2ECluster

pytestmark = pytest.mark.e2e

GPUPOOL_API = "/apis/gpupool.io/v1alpha1"


def _namespace(api: KubeApi) -> str:
    name = f"hami-{secrets.token_hex(3)}"
    api.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
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
    lease_ns, uid = running["metadata"]["annotations"]["gpupool.io/lease"].split("/")
    lease = c.api.get(f"{GPUPOOL_API}/namespaces/{lease_ns}/gpuleases/{uid}")
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
    ],
    ids=["mixed", "percentage-over-100", "timeslice"],
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


def test_a_pod_asking_only_nvidia_gpu_is_not_sent_to_gpupool(gpupool_cluster: E2ECluster) -> None:
    c = gpupool_cluster
    ns = _namespace(c.api)
    created = _kubectl(c, ns, pod_json("plain", limits={"nvidia.com/gpu": "1"}))
    assert created.returncode == 0 and "Warning" not in created.stderr, created.stderr
    stored = c.api.get(f"/api/v1/namespaces/{ns}/pods/plain")
    assert stored["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert not stored["spec"].get("schedulingGates")  # gpupool did not touch it
