"""deploy/rbac on the dev cluster, and the identities gpupool's components run under there.

`up` applies deploy/rbac (namespace.yaml first: gpupool-system and gpupool-node-lease, where the
nodes' heartbeat Leases live) as admin, then gives each gpupool process a client
certificate for its ServiceAccount's user name (CN `system:serviceaccount:gpupool-system:NAME`,
O `system:serviceaccounts` and `system:serviceaccounts:gpupool-system`): the apiserver's x509
authenticator turns that into exactly the user and groups a ServiceAccount token would give, so
the roles' ServiceAccount subjects apply and each component has only its role's rights. The
processes run on the host, outside any pod, so a certificate is simpler than a token to hand
them (kube-controller-manager runs now and would issue tokens).

tenant.yaml is a template (NAMESPACE, TENANT): `up` applies only its parts without placeholders
(the `gpupool-tenant` ClusterRole); `tenant_rbac` instantiates the rest for one tenant.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from gpupool.devcluster.apiclient import KubeApi

NAMESPACE = "gpupool-system"
TENANT_FILE = "tenant.yaml"
NAMESPACE_FILE = "namespace.yaml"
QUOTA_ADMINS_GROUP = "gpupool-quota-admins"

# The dev cluster's gpupool processes and the ServiceAccount (deploy/rbac) each runs as. The
# heartbeat process stands in for `gpupool agent` on every fake node, so it is the agent.
COMPONENT_ACCOUNTS: dict[str, str] = {
    "gpupool-extender": "gpupool-extender",
    "gpupool-webhook": "gpupool-webhook",
    "gpupool-controller": "gpupool-controller",
    "gpupool-heartbeat": "gpupool-agent",
    "gpupool-web": "gpupool-web",
}

# Dev cluster only, not in deploy/rbac: a real agent watches just its own Node (by field
# selector), but the fake heartbeat serves every kwok node from one process and watches them all.
FAKE_AGENT_RBAC: tuple[dict[str, Any], ...] = (
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "gpupool-dev-fake-agent"},
        "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]}],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "gpupool-dev-fake-agent"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "gpupool-dev-fake-agent",
        },
        "subjects": [{"kind": "ServiceAccount", "name": "gpupool-agent", "namespace": NAMESPACE}],
    },
)

_PLACEHOLDER = re.compile(r"\b(NAMESPACE|TENANT)\b")


def service_account_user(name: str, namespace: str = NAMESPACE) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def service_account_groups(namespace: str = NAMESPACE) -> tuple[str, ...]:
    return ("system:serviceaccounts", f"system:serviceaccounts:{namespace}")


def default_rbac_dir() -> Path:
    """deploy/rbac of the source tree this package runs from."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / "deploy" / "rbac"
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"no deploy/rbac folder above {here}")


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _strings(obj: Any) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _strings(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return []


def _is_template(doc: dict[str, Any]) -> bool:
    return any(_PLACEHOLDER.search(s) for s in _strings(doc))


def _substitute(obj: Any, values: dict[str, str]) -> Any:
    if isinstance(obj, str):
        return _PLACEHOLDER.sub(lambda m: values[m.group(1)], obj)
    if isinstance(obj, dict):
        return {k: _substitute(v, values) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_substitute(v, values) for v in obj]
    return obj


def load_rbac(folder: Path | None = None) -> list[dict[str, Any]]:
    """Every object of deploy/rbac but tenant.yaml's templates; the namespaces first."""
    folder = folder or default_rbac_dir()
    paths = sorted(folder.glob("*.yaml"), key=lambda p: (p.name != NAMESPACE_FILE, p.name))
    docs = [d for path in paths for d in _documents(path)]
    return [d for d in docs if not _is_template(d)]


def tenant_rbac(namespace: str, tenant: str, folder: Path | None = None) -> list[dict[str, Any]]:
    """tenant.yaml for one tenant: group `TENANT-developers` reads the GpuLeases of `namespace`
    and its own GpuQuota `tenant` (the placeholders replaced; the shared ClusterRole included)."""
    path = (folder or default_rbac_dir()) / TENANT_FILE
    values = {"NAMESPACE": namespace, "TENANT": tenant}
    return [_substitute(d, values) for d in _documents(path)]


def apply(api: KubeApi, objects: list[dict[str, Any]]) -> None:
    """Create (or replace) each object in order, with `api`'s (admin) identity."""
    for obj in objects:
        api.create_or_replace(obj)
