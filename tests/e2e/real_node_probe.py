"""What the real-node e2e tests share: the GPU probe's Deployment as a user writes it, the wait
for its running pod, and the check of what the probe saw inside its container.

Used by test_real_node_e2e.py (gpupool as host processes) and test_helm_real_node_e2e.py (gpupool
installed with the Helm chart), so both prove the same thing about a pod's slice.
"""

from __future__ import annotations

from typing import Any

from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.realnode.fake_gpus import driver_uuid
from gpupool.devcluster.realnode.layout import PROBE_IMAGE
from gpupool.domain.units import GiB

# The fake driver's card (what the agent's inventory says it is): 80 GiB.
CARD_BYTES = 80 * GiB


def create_namespace(api: KubeApi, name: str) -> str:
    api.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    return name


def probe_deployment(name: str, memory: str) -> dict[str, Any]:
    """What a user writes: a Deployment whose container asks for gpupool.io/gpu-memory."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"type": "real"},
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "probe",
                            "image": PROBE_IMAGE,
                            "imagePullPolicy": "Never",
                            "resources": {"limits": {"gpupool.io/gpu-memory": memory}},
                        }
                    ],
                },
            },
        },
    }


def running_pod(api: KubeApi, ns: str, app: str) -> dict[str, Any] | None:
    """A pod labelled app=`app` with a running container, or None."""
    pods = api.get(f"/api/v1/namespaces/{ns}/pods?labelSelector=app%3D{app}")["items"]
    for pod in pods:
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        if any((s.get("state") or {}).get("running") for s in statuses):
            return dict(pod)
    return None


def finished_output(logs: str) -> str | None:
    """The probe's log once it has printed everything, else None."""
    return logs if "probe done" in logs else None


def assert_probe_saw_its_limit(out: str, limit: int) -> None:
    """The CUDA driver API and NVML report `limit` bytes (never the card's 80 GiB), an
    allocation past it fails with CUDA_ERROR_OUT_OF_MEMORY and one of half of it succeeds."""
    assert f"cuda: device 0 {driver_uuid(0)} total {limit} " in out, out
    assert f"cuda: cuMemGetInfo free {limit} total {limit}" in out, out
    assert f"nvml: device 0 {driver_uuid(0)} total {limit} used 0" in out, out
    assert "(past the total): CUDA_ERROR_OUT_OF_MEMORY" in out, out
    assert "(half the total): CUDA_SUCCESS" in out, out
    assert str(CARD_BYTES) not in out  # the whole card never shows through
