"""The dev cluster's PKI: a CA, the apiserver's serving certificate, client certificates and the
service-account signing key; `issue_client` issues more client certificates from the same CA
later (gpupool's components, tenants and quota admins in tests, `dev-cluster kubeconfig --user`).
ECDSA P-256 throughout: generating it takes microseconds, and every component (Go's crypto/tls,
kubectl, Python's ssl) accepts it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gpupool.adapters.tls import Authority, name, new_key, write_cert, write_key

# The first address of the service range: in-cluster clients reach the apiserver there.
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
KUBERNETES_SERVICE_IP = "10.0.0.1"
KUBELET_CLIENT_USER = "kube-apiserver-kubelet-client"
APISERVER_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


@dataclass(frozen=True, slots=True)
class KeyPair:
    cert: Path
    key: Path


@dataclass(frozen=True, slots=True)
class Pki:
    """Paths of every file `generate_pki` writes."""

    ca: KeyPair
    apiserver: KeyPair
    admin: KeyPair
    scheduler: KeyPair
    controller_manager: KeyPair
    extender: KeyPair  # the extender's serving certificate (kube-scheduler checks it)
    kubelet_client: KeyPair
    service_account_key: Path
    service_account_pub: Path


def generate_pki(folder: Path, *, now: dt.datetime | None = None) -> Pki:
    """Write a fresh CA and every certificate and key the cluster needs into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    ca = Authority("gpupool-dev-cluster-ca", now or dt.datetime.now(dt.UTC))

    def pair(name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> KeyPair:
        paths = KeyPair(folder / f"{name}.crt", folder / f"{name}.key")
        write_cert(paths.cert, cert)
        write_key(paths.key, key)
        return paths

    ca_pair = pair("ca", ca.cert, ca.key)
    apiserver = pair(
        "apiserver",
        *ca.issue(
            name("kube-apiserver"),
            server=True,
            dns_names=APISERVER_DNS_NAMES,
            ips=("127.0.0.1", KUBERNETES_SERVICE_IP),
        ),
    )
    # system:masters bypasses RBAC; the scheduler gets the identity RBAC bootstraps roles for.
    admin = pair("admin", *ca.issue(name("gpupool-admin", "system:masters"), server=False))
    scheduler = pair("scheduler", *ca.issue(name("system:kube-scheduler"), server=False))
    controller_manager = pair(
        "controller-manager", *ca.issue(name("system:kube-controller-manager"), server=False)
    )
    # The apiserver's identity towards kubelets (logs, exec): a kubelet's webhook authorizer
    # asks the apiserver whether it may, and RBAC answers from KUBELET_CLIENT_ROLE's binding.
    kubelet_client = pair("kubelet-client", *ca.issue(name(KUBELET_CLIENT_USER), server=False))
    extender = pair(
        "extender",
        *ca.issue(name("gpupool-extender"), server=True, dns_names=("localhost",),
                  ips=("127.0.0.1",)),
    )  # fmt: skip

    sa_key = new_key()
    sa_key_path = folder / "service-account.key"
    sa_pub_path = folder / "service-account.pub"
    write_key(sa_key_path, sa_key)
    sa_pub_path.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    # by keyword: two KeyPair fields swapped by position type-check and fail only at a TLS handshake
    return Pki(
        ca=ca_pair,
        apiserver=apiserver,
        admin=admin,
        scheduler=scheduler,
        controller_manager=controller_manager,
        extender=extender,
        kubelet_client=kubelet_client,
        service_account_key=sa_key_path,
        service_account_pub=sa_pub_path,
    )


def issue_client(
    folder: Path,
    stem: str,
    user: str,
    groups: tuple[str, ...] = (),
    *,
    now: dt.datetime | None = None,
) -> KeyPair:
    """A client certificate for `user` in `groups`, signed by the CA in `folder` (ca.crt and
    ca.key, as `generate_pki` wrote them), written to `folder`/clients/`stem`.crt and .key.

    The apiserver's x509 authenticator takes the CN as the user name and each O as a group, so
    CN `system:serviceaccount:NS:NAME` with O `system:serviceaccounts` and
    `system:serviceaccounts:NS` is what RBAC's ServiceAccount subject NS/NAME matches."""
    ca = Authority.load(folder / "ca.crt", folder / "ca.key", now or dt.datetime.now(dt.UTC))
    cert, key = ca.issue(name(user, *groups), server=False)
    clients = folder / "clients"
    clients.mkdir(exist_ok=True)
    paths = KeyPair(clients / f"{stem}.crt", clients / f"{stem}.key")
    write_cert(paths.cert, cert)
    write_key(paths.key, key)
    return paths
