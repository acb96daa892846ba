"""Lease expiry and renewal end to end: extender, webhook and controller as processes over a dev
cluster of this module (`process_stack`), the pod-integrity policy applied as `dev-cluster up`
applies it. Two pods with a 20 s lease TTL: the tenant's developer renews one (annotation
`gpupool.io/renew`), the other is left alone; the unrenewed pod gets its expiry notice, is
evicted through the Eviction API after its tenant's 3 s grace period, and its lease ends Expired
with its GiB-hours; the renewed pod keeps running. A developer of another tenant cannot renew;
a negative TTL is refused at admission.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from process_stack import (
    GROUP,
    LIVE,
    Stack,
    events_with,
    lease_of,
    pod_annotations,
    pod_get,
    pod_running,
    process_stack,
)
from support.builders import pod_json

from gpupool.adapters.webhook import policy
from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.certs import issue_client
from gpupool.devcluster.cluster import DevCluster
from gpupool.devcluster.errors import ApiError
from gpupool.devcluster.polling import poll_until

pytestmark = pytest.mark.e2e

NOTICE = "gpupool.io/expiry-notice"
RENEW = "gpupool.io/renew"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"


@dataclass(frozen=True)
class Tenant:
    name: str
    namespace: str
    developer: KubeApi  # in group <tenant>-developers
    outsider: KubeApi  # another tenant's developer, with the same rights on these pods


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with process_stack(tmp_path_factory.mktemp("expiry-e2e"), "8xA100-80GB", "expiry") as s:
        vap, bound = policy.objects()
        s.api.create(f"{ADMISSION}/validatingadmissionpolicies", vap)
        s.api.create(f"{ADMISSION}/validatingadmissionpolicybindings", bound)
        yield s


def _user(s: Stack, user: str, group: str) -> KubeApi:
    pki = DevCluster(s.logs / "cluster").pki_dir
    pair = issue_client(pki, f"test-{user}", user, (group,))
    return KubeApi(s.api.server, pki / "ca.crt", pair.cert, pair.key)


@pytest.fixture(scope="module")
def tenant(stack: Stack) -> Tenant:
    api = stack.api
    name = f"exp-{secrets.token_hex(3)}"
    try:
        api.create(f"{GROUP}/gpuquotas", {
            "apiVersion": "gpupool.io/v1alpha1", "kind": "GpuQuota", "metadata": {"name": name},
            "spec": {"nominal": "48Gi", "reclaimGracePeriodSeconds": 3},
        })  # fmt: skip
    except ApiError as err:  # the webhook's log says what the API server answered it
        raise AssertionError(f"{err}\n{stack.tail()}") from err
    ns = f"{name}-ns"
    labels = {stack.selector[0]: stack.selector[1], "gpupool.io/tenant": name}
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                      "metadata": {"name": ns, "labels": labels}})  # fmt: skip
    groups = [f"{name}-developers", "other-developers"]
    api.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "pods", "namespace": ns},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "patch"]}],
    })  # fmt: skip
    api.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "pods", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pods"},
        "subjects": [{"kind": "Group", "name": g, "apiGroup": "rbac.authorization.k8s.io"}
                     for g in groups],
    })  # fmt: skip
    return Tenant(name, ns, _user(stack, "dev", groups[0]), _user(stack, "mallory", groups[1]))


def _pod(name: str, ttl: str) -> dict[str, Any]:
    return pod_json(name, gpu_memory="12Gi", grace_s=0, annotations={"gpupool.io/lease-ttl": ttl})


def _lease(s: Stack, ns: str, uid: str) -> dict[str, Any]:
    lease: dict[str, Any] = s.api.get(f"{GROUP}/namespaces/{ns}/gpuleases/{uid}")
    return lease


def _renew(api: KubeApi, ns: str, name: str, value: str) -> None:
    api.patch(f"/api/v1/namespaces/{ns}/pods/{name}", {"metadata": {"annotations": {RENEW: value}}})


def test_an_unrenewed_lease_is_evicted_after_its_grace_and_a_renewed_one_is_not(
    stack: Stack, tenant: Tenant
) -> None:
    api, ns = stack.api, tenant.namespace
    for name in ("kept", "left"):
        api.create(f"/api/v1/namespaces/{ns}/pods", _pod(name, "20s"))
    for name in ("kept", "left"):
        assert poll_until(lambda n=name: pod_running(api, ns, n), timeout_s=60), stack.tail()
    uids = {n: (pod_get(api, ns, n) or {})["metadata"]["uid"] for n in ("kept", "left")}
    for name, uid in uids.items():  # the controller writes each lease's expiry when it sees it
        lease_of(stack, ns, uid)  # created after the Binding, in the background
        spec = poll_until(lambda u=uid: _lease(stack, ns, u)["spec"].get("expiry") and
                          _lease(stack, ns, u)["spec"], timeout_s=30)  # fmt: skip
        assert spec and spec["ttlSeconds"] == 20, (name, spec, stack.tail())

    renewals = iter(range(1, 10_000))

    def renew_kept_until_left_is_gone() -> bool:
        _renew(tenant.developer, ns, "kept", str(next(renewals)))  # the tenant renews: allowed
        return pod_get(api, ns, "left") is None

    assert poll_until(renew_kept_until_left_is_gone, timeout_s=90, interval_s=2), stack.tail()

    reasons = [e["reason"] for e in events_with(api, ns, "left", "LeaseExpired", "LeaseEvicted")]
    assert "LeaseExpired" in reasons and "LeaseEvicted" in reasons, reasons
    left = poll_until(lambda: (lambda le: le if le["status"].get("phase") not in LIVE else None)(
        _lease(stack, ns, uids["left"])), timeout_s=30)  # fmt: skip
    assert left is not None, stack.tail()
    status = left["status"]
    assert status["phase"] == "Expired" and status["gibHours"] > 0, status
    condition = next(c for c in status["conditions"] if c["type"] == "Expired")
    assert "not renewed" in condition["message"], condition
    assert status["end"] > left["spec"]["expiry"]  # held through the grace period, metered so

    kept = pod_running(api, ns, "kept")
    assert kept is not None and NOTICE not in pod_annotations(kept), kept
    kept_lease = _lease(stack, ns, uids["kept"])
    assert kept_lease["status"]["phase"] == "Active", kept_lease["status"]
    assert kept_lease["spec"]["expiry"] > left["spec"]["expiry"], kept_lease["spec"]


def test_another_tenants_developer_cannot_renew(stack: Stack, tenant: Tenant) -> None:
    api, ns = stack.api, tenant.namespace
    api.create(f"/api/v1/namespaces/{ns}/pods", _pod("guarded", "1h"))
    assert poll_until(lambda: pod_get(api, ns, "guarded"), timeout_s=30)
    with pytest.raises(ApiError) as caught:
        _renew(tenant.outsider, ns, "guarded", "forged")
    assert caught.value.status == 403, caught.value
    message = str(caught.value)
    assert f"only the tenant of the pod writes it: a member of group {tenant.name}-developers" in (
        message
    ), message
    assert RENEW not in pod_annotations(pod_get(api, ns, "guarded") or {})
    _renew(tenant.developer, ns, "guarded", "1")  # the pod's own tenant may
    assert pod_annotations(pod_get(api, ns, "guarded") or {})[RENEW] == "1"


def test_a_negative_ttl_is_refused_at_admission(stack: Stack, tenant: Tenant) -> None:
    with pytest.raises(ApiError) as caught:
        stack.api.create(f"/api/v1/namespaces/{tenant.namespace}/pods", _pod("bad", "-20s"))
    assert "gpupool.io/lease-ttl must be a positive duration such as 2h" in str(caught.value)
    assert json.dumps("-20s") in str(caught.value) or "'-20s'" in str(caught.value)


def test_a_quota_with_a_negative_default_ttl_is_refused(stack: Stack) -> None:
    quota = {"apiVersion": "gpupool.io/v1alpha1", "kind": "GpuQuota",
             "metadata": {"name": f"neg-{secrets.token_hex(3)}"},
             "spec": {"nominal": "24Gi", "leaseTTLSeconds": -5}}  # fmt: skip
    with pytest.raises(ApiError) as caught:
        stack.api.create(f"{GROUP}/gpuquotas", quota)
    assert caught.value.status == 422, caught.value
    assert "spec.leaseTTLSeconds" in str(caught.value), caught.value
