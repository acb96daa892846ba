"""TLS material for gpupool's own endpoints: a private CA that issues certificates.

ECDSA P-256 throughout: generating it takes microseconds, and every component (Go's crypto/tls,
kubectl, Python's ssl) accepts it. Used by the dev cluster's PKI and the webhook's serving cert.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=365)


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def name(common_name: str, *organizations: str) -> x509.Name:
    """CN and one O per organization (the apiserver reads CN as the user, each O as a group)."""
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    attributes += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    return x509.Name(attributes)


def write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


class Authority:
    """A private CA that issues server and client certificates (ECDSA P-256)."""

    def __init__(self, common_name: str, now: dt.datetime) -> None:
        self.now = now
        self.key = new_key()
        self.name = name(common_name)
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

    @classmethod
    def load(cls, cert_path: Path, key_path: Path, now: dt.datetime) -> Authority:
        """The CA whose certificate and key `cert_path` and `key_path` hold (PEM), to issue more."""
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{key_path}: not an ECDSA private key")
        authority = cls.__new__(cls)
        authority.now = now
        authority.key = key
        authority.cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        authority.name = authority.cert.subject
        return authority

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
        key = new_key()
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


def server_context(cert: Path, key: Path, client_ca: Path | None = None) -> ssl.SSLContext:
    """A TLS server context serving `cert`; with `client_ca`, a client certificate signed by it is
    asked for and verified when one is offered (CERT_OPTIONAL: whether a path needs one, and
    whose, is the server's decision per request, so that health probes need none)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert), str(key))
    if client_ca is not None:
        context.load_verify_locations(cafile=str(client_ca))
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


def peer_common_name(peercert: object) -> str | None:
    """The CN of a verified peer certificate as `ssl.SSLSocket.getpeercert()` gives it; None
    without one (no certificate offered, or it did not verify)."""
    if not isinstance(peercert, dict):
        return None
    for rdn in peercert.get("subject") or ():
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None
