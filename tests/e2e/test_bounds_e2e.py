"""Bounds on what tenants write, end to end (issue 24, "blast radius of one"): extender, webhook
and controller as processes over a dev cluster of this module (`process_stack`: the real
kube-apiserver with gpupool's CRDs, kube-scheduler, kube-controller-manager).

- A GpuQuota of `nominal: "1e400"` (or a lease TTL of 68 years) is refused by the API server
  with the bound named; one at the bounds is accepted.
- A pod with `gpupool.io/lease-ttl: "100000000h"`, or one longer than its tenant's
  `leaseTTLSeconds`, is refused at create with the bound named.
- A TTL that gets in anyway (written on a waiting pod after its create, which the webhook never
  sees) is cut to its tenant's `leaseTTLSeconds`: its lease gets the tenant's 20 s and expires.
- A Deployment asking to be autoscaled to 3,000,000,000 replicas gets one Warning event naming
  the bound and is never scaled, while another tenant's pod is admitted and placed.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from process_stack import (
    GROUP,
    Stack,
    events_with,
    pod_annotations,
    pod_get,
    pod_running,
    process_stack,
)
from support.builders import pod_json

from gpupool.adapters.wire import names
from gpupool.devcluster.errors import ApiError
from gpupool.devcluster.polling import poll_until

pytestmark = pytest.mark.e2e

NOTICE = "gpupool.io/expiry-notice"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with process_stack(tmp_path_factory.mktemp("bounds-e2e"), "8xA100-80GB", "bounds") as s:
        s.controller.stop()  # the autoscaler every second, so its report comes soon
        s.controller.argv += ["--autoscale-interval", "1"]
        s.controller.start()
        yield s


def _quota(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "gpupool.io/v1alpha1", "kind": "GpuQuota",
            "metadata": {"name": name}, "spec": spec}  # fmt: skip


def _tenant(s: Stack, prefix: str, **spec: Any) -> str:
    """A tenant with its GpuQuota (`spec`) and its namespace (named as the tenant)."""
    name = f"{prefix}-{secrets.token_hex(3)}"
    try:
        s.api.create(f"{GROUP}/gpuquotas", _quota(name, **spec))
    except ApiError as err:
        raise AssertionError(f"{err}\n{s.tail()}") from err
    labels = {s.selector[0]: s.selector[1], "gpupool.io/tenant": name}
    s.api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                        "metadata": {"name": name, "labels": labels}})  # fmt: skip
    return name


def _refused(s: Stack, path: str, body: dict[str, Any]) -> str:
    with pytest.raises(ApiError) as caught:
        s.api.create(path, body)
    return str(caught.value)


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"nominal": "1e400"}, "nominal must be a quantity from 0 to 1Ei"),
        ({"nominal": "2Ei"}, "nominal must be a quantity from 0 to 1Ei"),
        ({"nominal": "2000000", "resource": "gpu"}, "nominal may be at most 1000000"),
        ({"nominal": "1Gi", "leaseTTLSeconds": 2**31 - 1}, "spec.leaseTTLSeconds"),
        ({"nominal": "1Gi", "maxPods": 2**31 - 1}, "spec.maxPods"),
    ],
)
def test_a_quota_beyond_the_bounds_is_refused_with_the_bound(
    stack: Stack, spec: dict[str, Any], words: str
) -> None:
    message = _refused(stack, f"{GROUP}/gpuquotas", _quota(f"q-{secrets.token_hex(3)}", **spec))
    assert words in message, message
    if "leaseTTLSeconds" in spec or "maxPods" in spec:
        assert "less than or equal to" in message, message


def test_a_quota_at_the_bounds_is_accepted(stack: Stack) -> None:
    name = f"q-{secrets.token_hex(3)}"
    stack.api.create(
        f"{GROUP}/gpuquotas",
        _quota(name, nominal="1Ei", maxPods=1_000_000, leaseTTLSeconds=31_622_400,
               budget={"limitHours": 10**13, "windowSeconds": 31_622_400}),
    )  # fmt: skip
    stack.api.delete(f"{GROUP}/gpuquotas/{name}")


def _pod(name: str, ttl: str | None = None, gib: int = 12) -> dict[str, Any]:
    notes = {} if ttl is None else {names.ANN_LEASE_TTL: ttl}
    return pod_json(name, gpu_memory=f"{gib}Gi", grace_s=0, annotations=notes)


def test_a_lease_ttl_beyond_the_bounds_is_refused_at_create(stack: Stack) -> None:
    ns = _tenant(stack, "ttl", nominal="48Gi", leaseTTLSeconds=30)
    message = _refused(stack, f"/api/v1/namespaces/{ns}/pods", _pod("forever", "100000000h"))
    assert "longer than the longest lease gpupool grants (8784h, 366 days)" in message, message
    message = _refused(stack, f"/api/v1/namespaces/{ns}/pods", _pod("long", "2h"))
    assert f"longer than tenant {ns}'s leases may live" in message, message
    assert "leaseTTLSeconds: 30s); ask for at most 30s" in message, message
    stack.api.create(f"/api/v1/namespaces/{ns}/pods", _pod("within", "30s"))
    assert poll_until(lambda: pod_get(stack.api, ns, "within"), timeout_s=30)


def _lease(s: Stack, ns: str, uid: str) -> dict[str, Any] | None:
    lease: dict[str, Any] | None = s.api.find(f"{GROUP}/namespaces/{ns}/gpuleases/{uid}")
    return lease


def test_a_ttl_written_after_create_is_cut_to_the_tenants_and_expires(stack: Stack) -> None:
    """`first` holds the tenant's whole quota with the tenant's 20 s TTL; `second` waits at the
    gate and is given a 100000000h TTL the webhook never sees. `first` expires and is evicted;
    `second` is admitted, its lease gets 20 s (not 100000000h), and it expires in turn."""
    api = stack.api
    ns = _tenant(stack, "cut", nominal="12Gi", leaseTTLSeconds=20, reclaimGracePeriodSeconds=2)
    api.create(f"/api/v1/namespaces/{ns}/pods", _pod("first"))
    assert poll_until(lambda: pod_running(api, ns, "first"), timeout_s=60), stack.tail()
    api.create(f"/api/v1/namespaces/{ns}/pods", _pod("second"))
    assert poll_until(
        lambda: names.ANN_QUEUE in pod_annotations(pod_get(api, ns, "second") or {}),
        timeout_s=30,
    ), stack.tail()
    api.patch(f"/api/v1/namespaces/{ns}/pods/second",
              {"metadata": {"annotations": {names.ANN_LEASE_TTL: "100000000h"}}})  # fmt: skip

    reasons = [e["reason"] for e in events_with(api, ns, "first", "LeaseExpired", timeout_s=60)]
    assert "LeaseExpired" in reasons, (reasons, stack.tail())
    second = poll_until(lambda: pod_running(api, ns, "second"), timeout_s=90)
    assert second is not None, stack.tail()
    uid = second["metadata"]["uid"]
    spec = poll_until(
        lambda: (lambda le: le["spec"] if le and le["spec"].get("expiry") else None)(
            _lease(stack, ns, uid)
        ),
        timeout_s=30,
    )
    assert spec is not None and spec["ttlSeconds"] == 20, (spec, stack.tail())
    # the short lease expires: the lease loop runs round after round, the poisoned TTL in it
    reasons = [e["reason"] for e in events_with(api, ns, "second", "LeaseExpired", timeout_s=60)]
    assert "LeaseExpired" in reasons, (reasons, stack.tail())


def _deployment(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    pod = pod_json(name, labels={"app": name}, gpu_memory="12Gi", grace_s=0)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": pod["metadata"], "spec": pod["spec"]},
        },
    }


def test_a_deployment_beyond_the_replica_bound_is_reported_and_others_go_on(stack: Stack) -> None:
    api = stack.api
    poisoned = _tenant(stack, "huge", nominal="48Gi")
    other = _tenant(stack, "calm", nominal="48Gi")
    notes = {
        names.ANN_AUTOSCALE: "true",
        names.ANN_AUTOSCALE_MIN: "3000000000",
        names.ANN_AUTOSCALE_MAX: "3000000000",
    }
    api.create(f"/apis/apps/v1/namespaces/{poisoned}/deployments", _deployment("web", notes))
    warned = events_with(api, poisoned, "web", "AutoscaleInvalid", timeout_s=60)
    [event] = [e for e in warned if e["reason"] == "AutoscaleInvalid"] or [None]
    assert event is not None, (warned, stack.tail())
    assert event["type"] == "Warning" and event["involvedObject"]["kind"] == "Deployment"
    assert (
        "above the most replicas gpupool autoscales (10,000, a cluster maximum)"
        in (event["message"])
    ), event

    api.create(f"/api/v1/namespaces/{other}/pods", _pod("meanwhile"))
    placed = poll_until(lambda: pod_running(api, other, "meanwhile"), timeout_s=60)
    assert placed is not None and placed["spec"].get("nodeName"), stack.tail()
    assert names.ANN_ADMITTED in pod_annotations(placed)
    deployment = api.get(f"/apis/apps/v1/namespaces/{poisoned}/deployments/web")
    assert deployment["spec"]["replicas"] == 1
    again = [e for e in events_with(api, poisoned, "web") if e["reason"] == "AutoscaleInvalid"]
    assert len(again) == 1 and again[0].get("count", 1) == 1, again  # reported once
