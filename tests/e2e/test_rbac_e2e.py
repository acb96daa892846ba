"""deploy/rbac on a real apiserver: every gpupool process of `dev-cluster up` runs as its own
ServiceAccount, each of those identities is refused what its component must not do, a tenant
reads only its own namespace's GpuLeases and its own GpuQuota (and changes no quota), and a quota
admin writes GpuQuotas.

That the whole path still places a pod under these identities (webhook, controller's quota gate,
extender's bind and lease, agent heartbeats) is test_full_stack.py's first test, on the same
session cluster; the tenant test here also places one pod, in the tenant's namespace.

Identities are client certificates from the cluster's CA: the apiserver takes the CN as the user
and each O as a group, which is exactly what RBAC's User, Group and ServiceAccount subjects match.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from gpupool.devcluster import rbac
from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.certs import issue_client
from gpupool.devcluster.errors import ApiError
from gpupool.devcluster.polling import poll_until

if TYPE_CHECKING:
    from conftest import E2ECluster

pytestmark = pytest.mark.e2e

GPUPOOL_API = "/apis/gpupool.io/v1alpha1"
QUOTAS = f"{GPUPOOL_API}/gpuquotas"
REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
GPUPOOL_COMPONENTS = tuple(rbac.COMPONENT_ACCOUNTS)


def _as(c: E2ECluster, user: str, groups: tuple[str, ...] = ()) -> KubeApi:
    """An API client authenticated as `user` in `groups` (a fresh certificate from the CA)."""
    stem = re.sub(r"[^a-z0-9-]+", "-", user.lower()) + "-" + secrets.token_hex(3)
    pair = issue_client(c.cluster.pki_dir, f"test-{stem}", user, groups)
    return KubeApi(c.state.server, c.cluster.pki_dir / "ca.crt", pair.cert, pair.key)


def _component(c: E2ECluster, component: str) -> KubeApi:
    """An API client with the very certificate `up` gave the component."""
    clients = c.cluster.pki_dir / "clients"
    return KubeApi(
        c.state.server,
        c.cluster.pki_dir / "ca.crt",
        clients / f"{component}.crt",
        clients / f"{component}.key",
    )


def _allowed(
    api: KubeApi,
    verb: str,
    resource: str,
    *,
    group: str = "gpupool.io",
    namespace: str | None = None,
    name: str | None = None,
) -> bool:
    """A SelfSubjectAccessReview: may this client `verb` `resource` (`res/sub` for a
    subresource)?"""
    plural, _, subresource = resource.partition("/")
    attributes = {"verb": verb, "group": group, "resource": plural}
    if subresource:
        attributes["subresource"] = subresource
    if namespace:
        attributes["namespace"] = namespace
    if name:
        attributes["name"] = name
    review = api.create(
        REVIEWS,
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        },
    )
    return bool(review["status"].get("allowed"))


def _status(call: Any) -> int:
    """The HTTP status a request gets (200 for any success)."""
    try:
        call()
    except ApiError as err:
        return err.status
    return 200


def _quota(name: str, nominal: str = "40Gi") -> dict[str, Any]:
    return {
        "apiVersion": "gpupool.io/v1alpha1",
        "kind": "GpuQuota",
        "metadata": {"name": name},
        "spec": {"nominal": nominal},
    }


def _namespace(api: KubeApi, prefix: str, labels: dict[str, str] | None = None) -> str:
    name = f"{prefix}-{secrets.token_hex(3)}"
    api.create(
        "/api/v1/namespaces",
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": labels or {}},
        },
    )
    return name


def _whoami(c: E2ECluster, kubeconfig: str) -> dict[str, Any]:
    out = subprocess.run(
        [str(c.binaries.kubectl), "--kubeconfig", kubeconfig, "auth", "whoami", "-o", "json"],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    )
    user: dict[str, Any] = json.loads(out.stdout)["status"]["userInfo"]
    return user


# ---- the components' identities ------------------------------------------------------------


def test_every_gpupool_process_runs_with_its_own_service_account_not_admin(
    gpupool_cluster: E2ECluster,
) -> None:
    c = gpupool_cluster
    records = {p.name: p for p in c.state.processes if p.name.startswith("gpupool-")}
    assert set(records) == set(GPUPOOL_COMPONENTS)
    for name, record in records.items():
        argv = list(record.argv)
        kubeconfig = argv[argv.index("--kubeconfig") + 1]
        assert Path(kubeconfig) != c.kubeconfig, f"{name} runs with the admin kubeconfig"
        user = _whoami(c, kubeconfig)
        account = rbac.COMPONENT_ACCOUNTS[name]
        assert user["username"] == f"system:serviceaccount:gpupool-system:{account}", name
        assert "system:masters" not in user.get("groups", [])
        assert "system:serviceaccounts:gpupool-system" in user.get("groups", [])


# (component, verb, resource, api group, namespace, name, allowed): each component is allowed
# what it needs (so a refusal below is RBAC's, not a broken identity) and refused the rest.
NS = "some-tenant-ns"
SYSTEM = "gpupool-system"
CRDS = "apiextensions.k8s.io"
ADMISSION = "admissionregistration.k8s.io"
NODE_LEASES = "gpupool-node-lease"
COORDINATION = "coordination.k8s.io"
CASES: list[tuple[str, str, str, str, str | None, str | None, bool]] = [
    # The extender: creates and deletes GpuLeases, annotates and binds pods; nothing more.
    ("gpupool-extender", "create", "gpuleases", "gpupool.io", NS, None, True),
    ("gpupool-extender", "create", "pods/binding", "", NS, None, True),
    ("gpupool-extender", "patch", "pods", "", NS, None, True),
    ("gpupool-extender", "delete", "gpuquotas", "gpupool.io", None, "any", False),
    ("gpupool-extender", "patch", "gpuquotas", "gpupool.io", None, "any", False),
    ("gpupool-extender", "get", "secrets", "", SYSTEM, None, False),
    ("gpupool-extender", "list", "secrets", "", None, None, False),
    ("gpupool-extender", "update", "gpuleases", "gpupool.io", NS, None, False),
    ("gpupool-extender", "patch", "gpuleases/status", "gpupool.io", NS, None, False),
    ("gpupool-extender", "patch", "gpunodes", "gpupool.io", None, None, False),
    ("gpupool-extender", "delete", "pods", "", NS, None, False),
    ("gpupool-extender", "create", "customresourcedefinitions", CRDS, None, None, False),
    # the compute-modes ConfigMap in its namespace, and no other ConfigMap
    ("gpupool-extender", "get", "configmaps", "", SYSTEM, "gpupool-compute-modes", True),
    ("gpupool-extender", "get", "configmaps", "", SYSTEM, "another-configmap", False),
    ("gpupool-extender", "update", "configmaps", "", SYSTEM, "gpupool-compute-modes", False),
    ("gpupool-extender", "list", "configmaps", "", NS, None, False),
    # The webhook: reads namespaces, quotas and pools, lists a gang's pods, and reads its own
    # serving Secret.
    ("gpupool-webhook", "get", "gpuquotas", "gpupool.io", None, "any", True),
    ("gpupool-webhook", "get", "namespaces", "", None, NS, True),
    ("gpupool-webhook", "list", "pods", "", NS, None, True),  # a gang's members (by label)
    ("gpupool-webhook", "get", "secrets", "", SYSTEM, "gpupool-webhook-tls", True),
    ("gpupool-webhook", "create", "gpuleases", "gpupool.io", NS, None, False),
    ("gpupool-webhook", "get", "secrets", "", SYSTEM, "another-secret", False),
    ("gpupool-webhook", "list", "secrets", "", SYSTEM, None, False),
    ("gpupool-webhook", "patch", "pods", "", NS, None, False),
    ("gpupool-webhook", "update", "gpuquotas", "gpupool.io", None, "any", False),
    ("gpupool-webhook", "patch", "mutatingwebhookconfigurations", ADMISSION, None, None, False),
    # The controller: status of quotas, leases and nodes; gates, evictions, lease deletion, a
    # lease's expiry terms (spec.expiry, ttlSeconds, renewal).
    ("gpupool-controller", "patch", "gpuquotas/status", "gpupool.io", None, "any", True),
    ("gpupool-controller", "create", "pods/eviction", "", NS, None, True),
    ("gpupool-controller", "delete", "gpuleases", "gpupool.io", NS, None, True),
    ("gpupool-controller", "patch", "gpuleases", "gpupool.io", NS, None, True),
    ("gpupool-controller", "patch", "gpuquotas", "gpupool.io", None, "any", False),
    ("gpupool-controller", "create", "gpuquotas", "gpupool.io", None, None, False),
    # a running pod's deleted lease, made again from its allocation (controllers/leases/restore)
    ("gpupool-controller", "create", "gpuleases", "gpupool.io", NS, None, True),
    ("gpupool-controller", "create", "pods/binding", "", NS, None, False),
    ("gpupool-controller", "list", "secrets", "", None, None, False),
    # defragmentation: the GpuNode mark, the GpuPool's condition, budgets read; no node writes
    ("gpupool-controller", "patch", "gpunodes", "gpupool.io", None, "n", True),
    ("gpupool-controller", "patch", "gpupools/status", "gpupool.io", None, "any", True),
    ("gpupool-controller", "list", "poddisruptionbudgets", "policy", None, None, True),
    ("gpupool-controller", "patch", "nodes", "", None, "n", False),
    ("gpupool-controller", "delete", "gpunodes", "gpupool.io", None, "n", False),
    # the autoscaler: workloads through their scale subresource, its record annotation on them
    ("gpupool-controller", "patch", "deployments/scale", "apps", NS, None, True),
    ("gpupool-controller", "update", "statefulsets/scale", "apps", NS, None, True),
    ("gpupool-controller", "patch", "deployments", "apps", NS, None, True),
    ("gpupool-controller", "list", "statefulsets", "apps", None, None, True),
    ("gpupool-controller", "delete", "deployments", "apps", NS, None, False),
    ("gpupool-controller", "create", "deployments", "apps", NS, None, False),
    ("gpupool-controller", "patch", "replicasets/scale", "apps", NS, None, False),
    # node health reads the nodes' heartbeat Leases (its watch cache lists and watches them); it
    # never writes one, nor reads other Leases
    ("gpupool-controller", "list", "leases", COORDINATION, NODE_LEASES, None, True),
    ("gpupool-controller", "watch", "leases", COORDINATION, NODE_LEASES, None, True),
    ("gpupool-controller", "patch", "leases", COORDINATION, NODE_LEASES, "n", False),
    ("gpupool-controller", "delete", "leases", COORDINATION, NODE_LEASES, "n", False),
    ("gpupool-controller", "list", "leases", COORDINATION, "kube-node-lease", None, False),
    # The node agent (the heartbeat process): its GpuNode, lease status; no lease, no quota.
    ("gpupool-heartbeat", "patch", "gpunodes/status", "gpupool.io", None, "n", True),
    ("gpupool-heartbeat", "create", "gpunodes", "gpupool.io", None, None, True),
    ("gpupool-heartbeat", "patch", "gpuleases/status", "gpupool.io", NS, None, True),
    ("gpupool-heartbeat", "create", "gpuleases", "gpupool.io", NS, None, False),
    ("gpupool-heartbeat", "patch", "gpuleases", "gpupool.io", NS, None, False),
    ("gpupool-heartbeat", "get", "gpuquotas", "gpupool.io", None, "any", False),
    ("gpupool-heartbeat", "delete", "pods", "", NS, None, False),
    ("gpupool-heartbeat", "list", "secrets", "", None, None, False),
    # another path on its node (docs/dra.md "One node, which path"): the ResourceSlices there,
    # an Event on the Node; without dra.enabled it publishes no slice of its own
    ("gpupool-heartbeat", "list", "resourceslices", "resource.k8s.io", None, None, True),
    # ... kept by watch (its own Node, the slices and its GpuNode, each by a field selector)
    ("gpupool-heartbeat", "watch", "resourceslices", "resource.k8s.io", None, None, True),
    ("gpupool-heartbeat", "watch", "nodes", "", None, None, True),
    ("gpupool-heartbeat", "watch", "gpunodes", "gpupool.io", None, None, True),
    ("gpupool-heartbeat", "create", "resourceslices", "resource.k8s.io", None, None, False),
    ("gpupool-heartbeat", "create", "events", "", "default", None, True),
    # its node's heartbeat Lease: made once, renewed with a merge patch; nothing else there
    ("gpupool-heartbeat", "create", "leases", COORDINATION, NODE_LEASES, None, True),
    ("gpupool-heartbeat", "patch", "leases", COORDINATION, NODE_LEASES, "n", True),
    ("gpupool-heartbeat", "delete", "leases", COORDINATION, NODE_LEASES, "n", False),
    ("gpupool-heartbeat", "patch", "leases", COORDINATION, SYSTEM, "gpupool-controller", False),
    ("gpupool-heartbeat", "patch", "leases", COORDINATION, "kube-node-lease", "n", False),
    # The web view: reads what `gpupool status` reads, asks who a visitor is and what they may
    # read; writes nothing.
    ("gpupool-web", "list", "gpuleases", "gpupool.io", None, None, True),
    ("gpupool-web", "list", "pods", "", None, None, True),
    ("gpupool-web", "watch", "gpuquotas", "gpupool.io", None, None, True),
    ("gpupool-web", "create", "tokenreviews", "authentication.k8s.io", None, None, True),
    ("gpupool-web", "create", "subjectaccessreviews", "authorization.k8s.io", None, None, True),
    ("gpupool-web", "patch", "pods", "", NS, None, False),
    ("gpupool-web", "create", "gpuleases", "gpupool.io", NS, None, False),
    ("gpupool-web", "patch", "gpuquotas/status", "gpupool.io", None, "any", False),
    ("gpupool-web", "create", "pods/eviction", "", NS, None, False),
    ("gpupool-web", "list", "secrets", "", None, None, False),
]


@pytest.mark.parametrize("component", GPUPOOL_COMPONENTS)
def test_each_component_identity_has_its_rights_and_is_refused_the_rest(
    gpupool_cluster: E2ECluster, component: str
) -> None:
    api = _component(gpupool_cluster, component)
    cases = [case for case in CASES if case[0] == component]
    assert any(case[-1] for case in cases) and any(not case[-1] for case in cases)
    wrong = []
    for _, verb, resource, group, namespace, name, expected in cases:
        got = _allowed(api, verb, resource, group=group, namespace=namespace, name=name)
        if got != expected:
            wrong.append(f"{verb} {resource} ns={namespace} name={name}: allowed={got}")
    assert not wrong, f"{component}: " + "; ".join(wrong)


def test_real_requests_beyond_a_components_role_are_answered_403(
    gpupool_cluster: E2ECluster,
) -> None:
    c = gpupool_cluster
    name = f"rbac-victim-{secrets.token_hex(3)}"
    c.api.create(QUOTAS, _quota(name))
    ns = _namespace(c.api, "rbac-403")
    extender = _component(c, "gpupool-extender")
    webhook = _component(c, "gpupool-webhook")
    controller = _component(c, "gpupool-controller")
    agent = _component(c, "gpupool-heartbeat")
    lease = {
        "apiVersion": "gpupool.io/v1alpha1",
        "kind": "GpuLease",
        "metadata": {"name": "forged"},
        "spec": {},
    }
    leases = f"{GPUPOOL_API}/namespaces/{ns}/gpuleases"
    assert _status(lambda: extender.delete(f"{QUOTAS}/{name}")) == 403
    assert _status(lambda: extender.get(f"/api/v1/namespaces/{SYSTEM}/secrets")) == 403
    assert _status(lambda: webhook.create(leases, lease)) == 403
    bigger = {"spec": {"nominal": "1Ti"}}
    assert _status(lambda: controller.patch(f"{QUOTAS}/{name}", bigger)) == 403
    assert _status(lambda: agent.create(leases, lease)) == 403
    # What each may do, through the same clients: the refusals above are not broken clients.
    assert _status(lambda: extender.get(leases)) == 200
    assert _status(lambda: webhook.get(f"{QUOTAS}/{name}")) == 200
    assert _status(lambda: controller.get(f"{QUOTAS}/{name}/status")) == 200
    assert c.api.get(f"{QUOTAS}/{name}")["spec"]["nominal"] == "40Gi"


# ---- tenants and quota admins --------------------------------------------------------------


def _user_kubeconfig(c: E2ECluster, user: str, *groups: str) -> str:
    """`gpupool dev-cluster kubeconfig --user ... --group ...`, as a user gets one."""
    args = [sys.executable, "-m", "gpupool.cli.main", "dev-cluster", "kubeconfig"]
    args += ["--dir", str(c.cluster.state_dir), "--user", user]
    for group in groups:
        args += ["--group", group]
    out = subprocess.run(args, check=True, capture_output=True, text=True, timeout=60)
    return out.stdout.strip()


def test_a_tenant_reads_its_namespaces_leases_and_its_own_quota_and_changes_no_quota(
    gpupool_cluster: E2ECluster,
) -> None:
    c = gpupool_cluster
    admin = c.api
    tenant = f"team-{secrets.token_hex(3)}"
    other = f"team-{secrets.token_hex(3)}"
    for quota in (tenant, other):
        admin.create(QUOTAS, _quota(quota))
    ns = _namespace(admin, tenant, {"gpupool.io/tenant": tenant})
    elsewhere = _namespace(admin, other, {"gpupool.io/tenant": other})
    rbac.apply(admin, rbac.tenant_rbac(ns, tenant))
    rbac.apply(admin, rbac.tenant_rbac(elsewhere, other))

    # One of the tenant's pods goes through the whole stack, so it has a lease to read.
    admin.create(
        f"/api/v1/namespaces/{ns}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "infer"},
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.example/infer:1",
                        "resources": {"limits": {"gpupool.io/gpu-memory": "12Gi"}},
                    }
                ]
            },
        },
    )

    def leased() -> str | None:
        pod = admin.get(f"/api/v1/namespaces/{ns}/pods/infer")
        return (pod["metadata"].get("annotations") or {}).get("gpupool.io/lease")

    lease_ref = poll_until(leased, timeout_s=60)
    assert lease_ref, "the tenant's pod got no GpuLease"
    lease_name = lease_ref.split("/")[1]

    # The tenant developer, with the kubeconfig the CLI writes.
    kubeconfig = _user_kubeconfig(c, "alice", f"{tenant}-developers")
    assert _whoami(c, kubeconfig)["groups"][0] == f"{tenant}-developers"
    dev = _as(c, "alice", (f"{tenant}-developers",))

    listed = dev.get(f"{GPUPOOL_API}/namespaces/{ns}/gpuleases")
    assert lease_name in {item["metadata"]["name"] for item in listed["items"]}
    assert dev.get(f"{GPUPOOL_API}/namespaces/{ns}/gpuleases/{lease_name}/status")
    assert _status(lambda: dev.get(f"{GPUPOOL_API}/namespaces/{elsewhere}/gpuleases")) == 403
    assert _status(lambda: dev.get(f"{GPUPOOL_API}/gpuleases")) == 403  # all namespaces

    own = dev.get(f"{QUOTAS}/{tenant}")
    assert own["spec"]["nominal"] == "40Gi"
    status = dev.get(f"{QUOTAS}/{tenant}/status")
    assert status["metadata"]["name"] == tenant
    assert _status(lambda: dev.patch(f"{QUOTAS}/{tenant}", {"spec": {"nominal": "1Ti"}})) == 403
    replaced = {**own, "spec": {**own["spec"], "nominal": "1Ti"}}
    assert _status(lambda: dev.request("PUT", f"{QUOTAS}/{tenant}", replaced)) == 403
    assert _status(lambda: dev.patch(f"{QUOTAS}/{tenant}/status", {"status": {}})) == 403
    assert _status(lambda: dev.delete(f"{QUOTAS}/{tenant}")) == 403
    assert _status(lambda: dev.create(QUOTAS, _quota(f"{tenant}-more"))) == 403
    assert _status(lambda: dev.get(f"{QUOTAS}/{other}")) == 403
    assert _status(lambda: dev.get(QUOTAS)) == 403  # a list would show every tenant's quota
    assert admin.get(f"{QUOTAS}/{tenant}")["spec"]["nominal"] == "40Gi"

    # The other tenant's developer sees its own namespace and quota, not this tenant's.
    neighbour = _as(c, "bob", (f"{other}-developers",))
    assert _status(lambda: neighbour.get(f"{GPUPOOL_API}/namespaces/{elsewhere}/gpuleases")) == 200
    assert _status(lambda: neighbour.get(f"{GPUPOOL_API}/namespaces/{ns}/gpuleases")) == 403
    assert _status(lambda: neighbour.get(f"{QUOTAS}/{other}")) == 200
    assert _status(lambda: neighbour.get(f"{QUOTAS}/{tenant}")) == 403


def test_a_quota_admin_creates_and_changes_quotas_but_not_their_status_nor_leases(
    gpupool_cluster: E2ECluster,
) -> None:
    c = gpupool_cluster
    name = f"team-{secrets.token_hex(3)}"
    ns = _namespace(c.api, "rbac-admin")
    nobody = _as(c, "quinn")  # the same user without the group: the group is what grants
    assert _status(lambda: nobody.create(QUOTAS, _quota(name))) == 403

    admin = _as(c, "quinn", (rbac.QUOTA_ADMINS_GROUP,))
    created = admin.create(QUOTAS, _quota(name))
    assert created["metadata"]["name"] == name
    admin.patch(f"{QUOTAS}/{name}", {"spec": {"nominal": "64Gi"}})
    assert c.api.get(f"{QUOTAS}/{name}")["spec"]["nominal"] == "64Gi"
    assert any(q["metadata"]["name"] == name for q in admin.get(QUOTAS)["items"])
    assert _status(lambda: admin.get(f"{GPUPOOL_API}/namespaces/{ns}/gpuleases")) == 200
    # The controller owns quota status; the extender and the controller own leases.
    assert _status(lambda: admin.patch(f"{QUOTAS}/{name}/status", {"status": {}})) == 403
    lease = {"apiVersion": "gpupool.io/v1alpha1", "kind": "GpuLease", "metadata": {"name": "x"}}
    assert _status(lambda: admin.create(f"{GPUPOOL_API}/namespaces/{ns}/gpuleases", lease)) == 403
    assert _status(lambda: admin.get(f"/api/v1/namespaces/{SYSTEM}/secrets")) == 403
    admin.delete(f"{QUOTAS}/{name}")
    assert _status(lambda: c.api.get(f"{QUOTAS}/{name}")) == 404


def test_no_gpupool_component_was_refused_by_rbac(gpupool_cluster: E2ECluster) -> None:
    """The session's work so far (this file's and whatever else ran on the cluster) went
    through without a single 403 in any gpupool component's log."""
    refused = [
        f"{log.name}: {line}"
        for log in gpupool_cluster.cluster.logs()
        if log.name.startswith("gpupool-")
        for line in log.read_text().splitlines()
        if "forbidden" in line.lower()
    ]
    assert not refused, "\n".join(refused[:20])
