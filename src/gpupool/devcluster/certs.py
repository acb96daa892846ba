"""The dev cluster's PKI: a CA, the apiserver's serving certificate, client certificates and the
service-account signing key. ECDSA P-256 throughout: generating it takes microseconds, and every
component (Go's crypto/tls, kubectl, Python's ssl) accepts it.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=365)
# The first address of the service range: in-cluster clients reach the apiserver there.
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
KUBERNETES_SERVICE_IP = "10.0.0.1"
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
    service_account_key: Path
    service_account_pub: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization is not None:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


class _Authority:
    def __init__(self, now: dt.datetime) -> None:
        self.now = now
        self.key = _key()
        self.name = _name("gpupool-dev-cluster-ca")
        self.cert = (
            self._builder(self.name, self.key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False
            )
            .sign(self.key, hashes.SHA256())
        )

    def _builder(
        self, subject: x509.Name, public_key: ec.EllipticCurvePublicKey
    ) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.name)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(self.now - dt.timedelta(minutes=5))
            .not_valid_after(self.now + VALIDITY)
        )

    def issue(
        self,
        subject: x509.Name,
        *,
        server: bool,
        dns_names: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
    ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = _key()
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            self._builder(subject, key.public_key())
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
        )
        if dns_names or ips:
            alt_names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
            alt_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        return builder.sign(self.key, hashes.SHA256()), key


def generate_pki(folder: Path, *, now: dt.datetime | None = None) -> Pki:
    """Write a fresh CA and every certificate and key the cluster needs into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    ca = _Authority(now or dt.datetime.now(dt.UTC))

    def pair(name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> KeyPair:
        paths = KeyPair(folder / f"{name}.crt", folder / f"{name}.key")
        _write_cert(paths.cert, cert)
        _write_key(paths.key, key)
        return paths

    ca_pair = pair("ca", ca.cert, ca.key)
    apiserver = pair(
        "apiserver",
        *ca.issue(
            _name("kube-apiserver"),
            server=True,
            dns_names=APISERVER_DNS_NAMES,
            ips=("127.0.0.1", KUBERNETES_SERVICE_IP),
        ),
    )
    # system:masters bypasses RBAC; the scheduler gets the identity RBAC bootstraps roles for.
    admin = pair("admin", *ca.issue(_name("gpupool-admin", "system:masters"), server=False))
    scheduler = pair("scheduler", *ca.issue(_name("system:kube-scheduler"), server=False))

    sa_key = _key()
    sa_key_path = folder / "service-account.key"
    sa_pub_path = folder / "service-account.pub"
    _write_key(sa_key_path, sa_key)
    sa_pub_path.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return Pki(ca_pair, apiserver, admin, scheduler, sa_key_path, sa_pub_path)
