"""Compute modes end to end: the real kube-scheduler calls `gpupool extender`, which reads the
operators' ConfigMap `gpupool-system/gpupool-compute-modes` (with its own identity and RBAC) and
writes each lease's compute mode at bind.

With `inference: mps at 40%` set, an inference slice's GpuLease carries `computeMode: mps` and
`mpsActiveThreadPercentage: 40`, a training slice's `none`. The ConfigMap is then edited into
one that does not parse: a Warning event on it names the key and the settings kept, and the
next inference pod still gets the last good settings (nothing of the bad version applied).
What Allocate makes of such a lease: tests/integration/test_device_plugin_grpc.py.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from process_stack import Stack, lease_of, pod_get, pod_running, process_stack
from support.builders import pod_json

from gpupool.devcluster.polling import poll_until

pytestmark = pytest.mark.e2e

CM = "/api/v1/namespaces/gpupool-system/configmaps"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with process_stack(tmp_path_factory.mktemp("modes-e2e"), "4xA100-80GB", "modes") as s:
        yield s


def _configmap(data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "gpupool-compute-modes", "namespace": "gpupool-system"},
        "data": data,
    }


def _namespace(s: Stack) -> str:
    name = f"cm-{secrets.token_hex(4)}"
    labels = {s.selector[0]: s.selector[1]}
    s.api.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}},
    )
    return name


def _lease_spec(s: Stack, ns: str, name: str, **annotations: str) -> dict[str, Any]:
    s.api.create(f"/api/v1/namespaces/{ns}/pods",
                 pod_json(name, gpu_memory="12Gi", grace_s=0, annotations=annotations))  # fmt: skip
    assert poll_until(lambda: pod_running(s.api, ns, name), timeout_s=30), s.tail()
    uid = (pod_get(s.api, ns, name) or {})["metadata"]["uid"]
    spec: dict[str, Any] = lease_of(s, ns, uid)["spec"]
    return spec


def _extender_read(s: Stack, words: str) -> bool:
    return words in (s.logs / "extender.log").read_text(errors="replace")


def test_the_configmaps_defaults_reach_the_lease_and_a_bad_edit_keeps_the_last_good(
    stack: Stack,
) -> None:
    api = stack.api
    api.create(CM, _configmap({"inference": "mps: true, activeThreadPercentage: 40"}))
    # the extender reads the ConfigMap every 5 s and logs what it applies
    assert poll_until(lambda: _extender_read(stack, "inference: MPS 40%"), timeout_s=30), (
        stack.tail()
    )
    ns = _namespace(stack)
    spec = _lease_spec(stack, ns, "infer")
    assert (spec.get("computeMode"), spec.get("mpsActiveThreadPercentage")) == ("mps", 40), spec
    training = _lease_spec(stack, ns, "train", **{"gpupool.io/workload": "training"})
    assert training.get("computeMode") == "none" and "mpsActiveThreadPercentage" not in training

    api.patch(f"{CM}/gpupool-compute-modes",
              {"data": {"inference": "mps: true, activeThreadPercentage: 150"}})  # fmt: skip

    def refused() -> dict[str, Any] | None:
        events = api.get(
            "/api/v1/namespaces/gpupool-system/events"
            "?fieldSelector=involvedObject.name=gpupool-compute-modes"
        )["items"]
        return next((e for e in events if e.get("reason") == "InvalidComputeModes"), None)

    event = poll_until(refused, timeout_s=30)
    assert event is not None, stack.tail()
    assert event["type"] == "Warning" and "key 'inference'" in event["message"], event
    assert "activeThreadPercentage must be a whole number from 1 to 100" in event["message"]
    assert "kept: inference: MPS 40%" in event["message"], event
    again = _lease_spec(stack, ns, "infer-2")
    assert (again.get("computeMode"), again.get("mpsActiveThreadPercentage")) == ("mps", 40)
