"""The nodes' heartbeat Leases in deploy/: their namespace is made before anything in it, and the
agent and the controller get exactly the verbs their code uses there (the agent: create once,
then merge-patch renewals; the controller: list and watch, for its watch cache)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpupool.adapters.kubernetes.node_lease import NODE_LEASE_NAMESPACE
from gpupool.devcluster import rbac

RBAC = Path(__file__).resolve().parents[3] / "deploy" / "rbac"


def _lease_verbs(docs: list[dict[str, Any]], account: str) -> set[str]:
    """The verbs on coordination.k8s.io leases in the Leases' namespace that `account` gets."""
    subject = {"kind": "ServiceAccount", "name": account, "namespace": rbac.NAMESPACE}
    roles = {
        b["roleRef"]["name"]
        for b in docs
        if b["kind"] == "RoleBinding"
        and b["metadata"]["namespace"] == NODE_LEASE_NAMESPACE
        and subject in b["subjects"]
    }
    return {
        verb
        for r in docs
        if r["kind"] == "Role"
        and r["metadata"]["namespace"] == NODE_LEASE_NAMESPACE
        and r["metadata"]["name"] in roles
        for rule in r["rules"]
        if "coordination.k8s.io" in rule["apiGroups"] and "leases" in rule["resources"]
        for verb in rule["verbs"]
    }


def test_the_agent_creates_and_patches_node_leases_and_the_controller_lists_them() -> None:
    docs = rbac.load_rbac()
    assert _lease_verbs(docs, "gpupool-agent") == {"create", "patch"}
    assert _lease_verbs(docs, "gpupool-controller") == {"list", "watch"}  # its watch cache
    for account in ("gpupool-extender", "gpupool-webhook", "gpupool-web"):
        assert _lease_verbs(docs, account) == set()


def test_every_namespace_is_made_before_the_objects_in_it() -> None:
    made: set[str] = set()
    for doc in rbac.load_rbac():
        if doc["kind"] == "Namespace":
            made.add(doc["metadata"]["name"])
        namespace = doc["metadata"].get("namespace")
        assert namespace is None or namespace in made, f"{doc['kind']} {doc['metadata']}"
    assert NODE_LEASE_NAMESPACE in made


def test_the_plain_node_lease_file_leaves_the_namespace_to_namespace_yaml() -> None:
    """kustomize refuses one object twice: the chart's Namespace is not rendered into it."""
    kinds = [d["kind"] for d in yaml.safe_load_all((RBAC / "node-lease.yaml").read_text()) if d]
    assert "Namespace" not in kinds
    namespaces = yaml.safe_load_all((RBAC / "namespace.yaml").read_text())
    assert NODE_LEASE_NAMESPACE in {d["metadata"]["name"] for d in namespaces if d}
