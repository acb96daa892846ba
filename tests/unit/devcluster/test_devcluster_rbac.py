"""deploy/rbac as the dev cluster reads it, and the client certificates of its identities."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.x509.oid import NameOID

from gpupool.devcluster import rbac
from gpupool.devcluster.certs import generate_pki, issue_client


def _names(docs: list[dict[str, Any]], kind: str) -> set[str]:
    return {d["metadata"]["name"] for d in docs if d["kind"] == kind}


def test_load_rbac_puts_the_namespace_first_and_leaves_the_tenant_templates_out() -> None:
    docs = rbac.load_rbac()
    assert docs[0]["kind"] == "Namespace"
    assert docs[0]["metadata"]["name"] == rbac.NAMESPACE
    text = repr(docs)
    assert "TENANT" not in text and "NAMESPACE" not in text
    # The tenant file's one object without placeholders is applied with the rest.
    assert "gpupool-tenant" in _names(docs, "ClusterRole")
    assert "gpupool-quota-admin" in _names(docs, "ClusterRoleBinding")


def test_every_component_identity_is_a_service_account_in_deploy_rbac() -> None:
    accounts = _names(rbac.load_rbac(), "ServiceAccount")
    assert set(rbac.COMPONENT_ACCOUNTS.values()) <= accounts


def test_tenant_rbac_fills_in_the_namespace_and_the_tenant() -> None:
    docs = rbac.tenant_rbac("ns-a", "team-a")
    text = repr(docs)
    assert "TENANT" not in text and "NAMESPACE" not in text
    [binding] = [d for d in docs if d["kind"] == "RoleBinding"]
    assert binding["metadata"]["namespace"] == "ns-a"
    assert binding["subjects"][0]["name"] == "team-a-developers"
    [quota_role] = [
        d
        for d in docs
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "gpupool-tenant-quota-team-a"
    ]
    assert quota_role["rules"][0]["resourceNames"] == ["team-a"]
    assert set(quota_role["rules"][0]["verbs"]) == {"get", "watch"}


def test_issue_client_signs_a_certificate_for_the_user_and_groups(tmp_path: Path) -> None:
    generate_pki(tmp_path)
    user = rbac.service_account_user("gpupool-extender")
    pair = issue_client(tmp_path, "extender", user, rbac.service_account_groups())
    cert = x509.load_pem_x509_certificate(pair.cert.read_bytes())
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
    assert cert.issuer == ca.subject
    cert.verify_directly_issued_by(ca)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == (
        "system:serviceaccount:gpupool-system:gpupool-extender"
    )
    organization = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    organizations = [a.value for a in organization]
    assert organizations == ["system:serviceaccounts", "system:serviceaccounts:gpupool-system"]
    assert cert.not_valid_after_utc > dt.datetime.now(dt.UTC)
    assert pair.key.stat().st_mode & 0o077 == 0
