"""Admission integrity on a real API server (issue 17, admission half): a tenant can neither open
the quota gate nor forge gpupool's marks; a webhook outage blocks only the pods that concern
gpupool; a GPU pod for another scheduler, or bigger than any card in the cluster, is refused in
our own words.

The tenant is a developer with the documented tenant RBAC (deploy/rbac/tenant.yaml) plus the
usual namespace `edit` rights on pods, authenticated by a client certificate from the cluster's CA
(what `gpupool dev-cluster kubeconfig --user U --group G` writes), on the session's full gpupool
cluster: its controller and extender run as their ServiceAccounts, and the pod-integrity policy
(deploy/policies) is applied by `dev-cluster up`. The outage test stops a webhook of its own,
registered for its namespaces only.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from support.builders import pod_json

from gpupool.adapters.webhook import register as registration
from gpupool.devcluster import rbac
from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.certs import issue_client
from gpupool.devcluster.errors import ApiError
from gpupool.devcluster.polling import poll_until
from gpupool.devcluster.ports import free_port

if TYPE_CHECKING:
    from conftest import E2ECluster

pytestmark = pytest.mark.e2e

GPUPOOL = str(Path(sys.executable).parent / "gpupool")
GATE = "gpupool.io/quota"
QUOTAS = "/apis/gpupool.io/v1alpha1/gpuquotas"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
GATE_MESSAGE = "the scheduling gate gpupool.io/quota is removed only by gpupool's controller"


@dataclass(frozen=True)
class Tenant:
    name: str
    namespace: str
    api: KubeApi  # as the tenant's developer
    kubeconfig: str  # the same developer, for kubectl
    admin: KubeApi
    kubectl: str

    def pods(self, name: str = "") -> str:
        base = f"/api/v1/namespaces/{self.namespace}/pods"
        return f"{base}/{name}" if name else base

    def pod(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.admin.get(self.pods(name))
        return found

    def run_kubectl(self, *args: str) -> subprocess.CompletedProcess[str]:
        argv = [self.kubectl, "--kubeconfig", self.kubeconfig, "-n", self.namespace, *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def _pod(
    name: str,
    limits: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    scheduler_name: str | None = None,
) -> dict[str, Any]:
    return pod_json(
        name,
        limits={"cpu": "1", **(limits or {})},
        annotations=annotations or {},
        scheduler_name=scheduler_name,
    )


def _gpu(memory: str) -> dict[str, str]:
    return {"gpupool.io/gpu-memory": memory}


def _gates(pod: dict[str, Any]) -> list[str]:
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


def _annotations(pod: dict[str, Any]) -> dict[str, str]:
    return dict(pod["metadata"].get("annotations") or {})


def _refused(call: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        call()
    assert caught.value.status in (400, 403, 422), caught.value
    return caught.value


@pytest.fixture(scope="module")
def tenant(gpupool_cluster: E2ECluster) -> Tenant:
    """Tenant `team-…` with a 24Gi GpuQuota, its namespace, and its developer's clients."""
    c = gpupool_cluster
    admin = c.api
    name = f"team-{secrets.token_hex(3)}"
    group = f"{name}-developers"
    admin.create(
        QUOTAS,
        {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": "GpuQuota",
            "metadata": {"name": name},
            "spec": {"nominal": "24Gi"},
        },
    )
    ns = f"{name}-ns"
    admin.create(
        "/api/v1/namespaces",
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": ns, "labels": {"gpupool.io/tenant": name}},
        },
    )
    # The usual namespace `edit` rights: the built-in ClusterRole, whose rules
    # kube-controller-manager's aggregation controller fills in shortly after the cluster starts.
    edit_filled = poll_until(
        lambda: bool(
            admin.get("/apis/rbac.authorization.k8s.io/v1/clusterroles/edit").get("rules")
        ),
        timeout_s=60,
    )
    assert edit_filled, "ClusterRole edit has no rules: is kube-controller-manager running?"
    bound = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "developers-edit", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "Group", "name": group, "apiGroup": "rbac.authorization.k8s.io"}],
    }
    rbac.apply(admin, [*rbac.tenant_rbac(ns, name), bound])
    pair = issue_client(c.cluster.pki_dir, f"test-{name}-alice", "alice", (group,))
    api = KubeApi(c.state.server, c.cluster.pki_dir / "ca.crt", pair.cert, pair.key)
    kubeconfig = str(c.cluster.user_kubeconfig("alice", (group,)))
    return Tenant(name, ns, api, kubeconfig, admin, str(c.binaries.kubectl))


@pytest.fixture(scope="module")
def queued(tenant: Tenant) -> tuple[str, str]:
    """Two 16Gi pods of the tenant: the first admitted (its gate removed by gpupool's
    controller, through the policy), the second gated over the 24Gi quota."""
    tenant.api.create(tenant.pods(), _pod("a1", _gpu("16Gi")))
    admitted = poll_until(lambda: not _gates(tenant.pod("a1")), timeout_s=60)
    assert admitted, tenant.pod("a1")
    tenant.api.create(tenant.pods(), _pod("a2", _gpu("16Gi")))
    waiting = poll_until(lambda: "gpupool.io/queue" in _annotations(tenant.pod("a2")), timeout_s=60)
    assert waiting, tenant.pod("a2")
    assert GATE in _gates(tenant.pod("a2"))
    return "a1", "a2"


# ---- the gate -------------------------------------------------------------------------------


def test_a_tenant_cannot_remove_the_quota_gate_and_its_over_quota_pod_stays_gated(
    tenant: Tenant, queued: tuple[str, str]
) -> None:
    _, waiting = queued
    # The exact command of the issue, as the tenant's developer runs it.
    patched = tenant.run_kubectl(
        "patch", "pod", waiting, "--type=json",
        "-p", '[{"op":"remove","path":"/spec/schedulingGates"}]',
    )  # fmt: skip
    assert patched.returncode != 0, patched.stdout
    assert GATE_MESSAGE in patched.stderr, patched.stderr
    # Through the API too, and with a replace of the whole pod.
    remove = [{"op": "remove", "path": "/spec/schedulingGates"}]
    error = _refused(
        lambda: tenant.api.request(
            "PATCH", tenant.pods(waiting), remove, content_type="application/json-patch+json"
        )
    )
    assert GATE_MESSAGE in str(error)
    pod = tenant.pod(waiting)
    ungated = {**pod, "spec": {**pod["spec"], "schedulingGates": []}}
    assert GATE_MESSAGE in str(
        _refused(lambda: tenant.api.request("PUT", tenant.pods(waiting), ungated))
    )
    after = tenant.pod(waiting)
    assert GATE in _gates(after)
    assert after["status"].get("phase") == "Pending" and not after["spec"].get("nodeName")
    assert "position 1 of 1" in _annotations(after)["gpupool.io/queue"]


# ---- the annotations gpupool writes --------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "gpupool.io/queued-at",
        "gpupool.io/allocation",
        "gpupool.io/lease",
        "gpupool.io/admitted",
        "gpupool.io/requeue",
        "gpupool.io/queue",
        "gpupool.io/reclaim-notice",
    ],
)
def test_a_tenant_cannot_set_or_change_an_annotation_gpupool_writes(
    tenant: Tenant, queued: tuple[str, str], key: str
) -> None:
    forged = {"metadata": {"annotations": {key: "2000-01-01T00:00:00.000000Z"}}}
    removed = {"metadata": {"annotations": {key: None}}}
    for name in queued:
        before = _annotations(tenant.pod(name))
        error = _refused(lambda name=name: tenant.api.patch(tenant.pods(name), forged))
        assert f"annotations {key} are written only by gpupool" in str(error)
        if key in before:  # removing it is a change too
            error = _refused(lambda name=name: tenant.api.patch(tenant.pods(name), removed))
            assert key in str(error)
        assert _annotations(tenant.pod(name)).get(key) == before.get(key)


def test_a_queue_position_cannot_be_forged_with_kubectl(
    tenant: Tenant, queued: tuple[str, str]
) -> None:
    _, waiting = queued
    annotated = tenant.run_kubectl(
        "annotate", "--overwrite", "pod", waiting, "gpupool.io/queued-at=2000-01-01T00:00:00Z"
    )
    assert annotated.returncode != 0, annotated.stdout
    assert "gpupool.io/queued-at are written only by gpupool" in annotated.stderr


def test_a_tenant_still_edits_its_own_labels_and_annotations_but_not_the_tenant_label(
    tenant: Tenant, queued: tuple[str, str]
) -> None:
    _, waiting = queued
    tenant.api.patch(
        tenant.pods(waiting),
        {"metadata": {"annotations": {"team.example/owner": "alice"}, "labels": {"app": "x"}}},
    )
    pod = tenant.pod(waiting)
    assert _annotations(pod)["team.example/owner"] == "alice"
    other = {"metadata": {"labels": {"gpupool.io/tenant": "someone-else"}}}
    error = _refused(lambda: tenant.api.patch(tenant.pods(waiting), other))
    assert "label gpupool.io/tenant is set from the namespace" in str(error)
    assert tenant.pod(waiting)["metadata"]["labels"]["gpupool.io/tenant"] == tenant.name


def test_a_tenant_cannot_join_leave_or_resize_a_gang_after_create(
    tenant: Tenant, queued: tuple[str, str]
) -> None:
    _, waiting = queued
    fixed = "label gpupool.io/gang and annotation gpupool.io/gang-size are set when the pod"
    for change in (
        {"metadata": {"labels": {"gpupool.io/gang": "late"}}},
        {"metadata": {"annotations": {"gpupool.io/gang-size": "2"}}},
    ):
        error = _refused(lambda change=change: tenant.api.patch(tenant.pods(waiting), change))
        assert fixed in str(error), error
    pod = tenant.pod(waiting)
    assert "gpupool.io/gang" not in pod["metadata"].get("labels", {})
    assert "gpupool.io/gang-size" not in _annotations(pod)


def test_pods_created_with_gpupools_marks_are_refused_and_a_forged_queued_at_is_replaced(
    tenant: Tenant,
) -> None:
    allocation = '[{"node": "gpu-node-0", "gpu": 0, "memory": 17179869184}]'
    for pod in (
        _pod("forged-gpu", _gpu("8Gi"), {"gpupool.io/allocation": allocation}),
        _pod("forged-cpu", None, {"gpupool.io/lease": f"{tenant.namespace}/x"}),
        _pod("forged-admitted", _gpu("8Gi"), {"gpupool.io/admitted": "{}"}),
    ):
        error = _refused(lambda pod=pod: tenant.api.create(tenant.pods(), pod))
        assert "are written by gpupool; remove them from the pod" in str(error)
    # A forged submit time on a GPU pod is overwritten with the webhook's clock (a mutating
    # webhook may be called twice and sees its own stamp, so it replaces, never keeps).
    early = "2000-01-01T00:00:00.000000Z"
    tenant.api.create(tenant.pods(), _pod("early", _gpu("8Gi"), {"gpupool.io/queued-at": early}))
    stamped = _annotations(tenant.pod("early"))["gpupool.io/queued-at"]
    assert stamped != early and stamped > "2026"
    # On a pod without GPUs nothing stamps it: a forged one is refused.
    plain = _pod("early-cpu", None, {"gpupool.io/queued-at": early})
    assert "gpupool.io/queued-at are written by gpupool" in str(
        _refused(lambda: tenant.api.create(tenant.pods(), plain))
    )


# ---- scheduler and size ----------------------------------------------------------------------


def test_a_gpu_pod_for_another_scheduler_is_refused_naming_the_one_to_use(tenant: Tenant) -> None:
    pod = _pod("elsewhere", _gpu("8Gi"), scheduler_name="volcano")
    error = str(_refused(lambda: tenant.api.create(tenant.pods(), pod)))
    assert "spec.schedulerName is 'volcano'" in error
    assert "set spec.schedulerName to 'default-scheduler'" in error
    # Pods without GPUs are not gpupool's business, whatever their scheduler.
    tenant.api.create(tenant.pods(), _pod("cpu-elsewhere", scheduler_name="volcano"))


def test_a_pod_over_the_clusters_largest_card_is_refused_naming_that_card(tenant: Tenant) -> None:
    for memory in ("1000Gi", "100Gi"):  # 100Gi fits a card gpupool knows (H200), not these
        error = str(
            _refused(lambda m=memory: tenant.api.create(tenant.pods(), _pod("big", _gpu(m))))
        )
        assert f"asks for {memory} per GPU but the largest card in this cluster (A100-80GB)" in (
            error
        )
        assert "allocatable" in error and "gpupool knows" not in error


# ---- a webhook outage ------------------------------------------------------------------------


@pytest.fixture
def stopped_webhook(gpupool_cluster: E2ECluster, tmp_path: Path) -> Iterator[tuple[KubeApi, str]]:
    """A namespace whose webhook (a second `gpupool webhook serve`, registered for it alone)
    has stopped without unregistering, as a crashed webhook does. The cluster's own webhook
    still runs: what is refused is refused for the stopped one. Yields (admin, namespace)."""
    c = gpupool_cluster
    api = c.api
    token = secrets.token_hex(3)
    label = ("gpupool.io/e2e-outage", token)
    name = f"gpupool-outage-{token}"
    port = free_port()
    with (tmp_path / "webhook.log").open("wb") as log:
        webhook = subprocess.Popen(
            [GPUPOOL, "webhook", "serve", "--host", "127.0.0.1", "--port", str(port),
             "--cert-dir", str(tmp_path / "certs"), "--kubeconfig", str(c.kubeconfig),
             "--register-url", f"https://127.0.0.1:{port}",
             "--namespace-label", f"{label[0]}={label[1]}", "--name", name],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        path = f"{ADMISSION}/mutatingwebhookconfigurations/{name}"
        registered = poll_until(lambda: webhook.poll() is None and api.exists(path), timeout_s=60)
        assert registered, (tmp_path / "webhook.log").read_text()
        ns = f"outage-{token}"
        api.create(
            "/api/v1/namespaces",
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": ns, "labels": {label[0]: label[1]}},
            },
        )
        # Registered, and called: a GPU pod gets the gate while the webhook runs.
        api.create(f"/api/v1/namespaces/{ns}/pods", _pod("before", _gpu("8Gi")))
        assert GATE in _gates(api.get(f"/api/v1/namespaces/{ns}/pods/before"))
        webhook.terminate()
        webhook.wait(timeout=30)
        yield api, ns
    finally:
        if webhook.poll() is None:
            webhook.kill()
            webhook.wait(timeout=30)
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            if api.exists(f"{ADMISSION}/{kind}/{name}"):
                api.delete(f"{ADMISSION}/{kind}/{name}")


def test_with_the_webhook_down_plain_pods_are_created_and_gpu_pods_refused_saying_why(
    stopped_webhook: tuple[KubeApi, str],
) -> None:
    api, ns = stopped_webhook
    pods = f"/api/v1/namespaces/{ns}/pods"
    created = api.create(pods, _pod("web"))  # no call to the webhook at all
    assert created["metadata"]["name"] == "web" and not _gates(created)
    for pod in (
        _pod("train", _gpu("8Gi")),
        _pod("whole", {"gpupool.io/gpu": "1"}),
        _pod("marked", None, {"gpupool.io/gpu-model": "A100-80GB"}),
    ):
        with pytest.raises(ApiError) as caught:
            api.create(pods, pod)
        message = str(caught.value)
        assert f'failed calling webhook "{registration.POD_WEBHOOK}"' in message, message
    names = {p["metadata"]["name"] for p in api.get(pods)["items"]}
    assert names == {"before", "web"}


def test_the_policy_holds_with_no_webhook_at_all(tenant: Tenant, queued: tuple[str, str]) -> None:
    """The pod-integrity policy is the API server's own CEL: what it refuses above needs no
    webhook call (pod updates are sent to none)."""
    configs = tenant.admin.get(f"{ADMISSION}/validatingwebhookconfigurations")["items"]
    hooks = [h for config in configs for h in config.get("webhooks") or []]
    assert not [h for h in hooks if "pods" in json.dumps(h.get("rules"))], hooks
    binding = tenant.admin.get(
        f"{ADMISSION}/validatingadmissionpolicybindings/gpupool-pod-integrity"
    )
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert tenant.admin.exists(f"{ADMISSION}/validatingadmissionpolicies/gpupool-pod-integrity")
