"""The webhook's TLS: a private CA and a serving certificate for the names the apiserver dials.

The apiserver only calls webhooks over HTTPS and checks the serving certificate against the
`caBundle` of the webhook configuration, so the webhook writes `ca.crt` (the bundle), `tls.crt`
and `tls.key` into its certificate folder. Existing files are reused while they cover the
requested names and stay valid for another day; otherwise a fresh CA and certificate replace them.
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


@dataclass(frozen=True, slots=True)
class ServingCert:
    ca: Path
    cert: Path
    key: Path

    def ca_bundle(self) -> bytes:
        return self.ca.read_bytes()


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _alt_names(hosts: tuple[str, ...]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for host in hosts:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            out.append(x509.DNSName(host))
    return out


def _covers(cert_path: Path, hosts: tuple[str, ...], now: dt.datetime) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        alt = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, x509.ExtensionNotFound):
        return False
    if cert.not_valid_after_utc < now + dt.timedelta(days=1):
        return False
    present = {str(n.value) for n in alt}
    return all(str(n.value) in present for n in _alt_names(hosts))


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def ensure_serving_cert(
    folder: Path, hosts: tuple[str, ...], *, now: dt.datetime | None = None
) -> ServingCert:
    """`folder`/ca.crt, tls.crt and tls.key for `hosts` (DNS names or IP addresses)."""
    if not hosts:
        raise ValueError("the serving certificate needs at least one host name or address")
    now = now or dt.datetime.now(dt.UTC)
    paths = ServingCert(folder / "ca.crt", folder / "tls.crt", folder / "tls.key")
    if paths.ca.exists() and paths.key.exists() and _covers(paths.cert, hosts, now):
        return paths
    folder.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("gpupool-webhook-ca")
    start, end = now - dt.timedelta(minutes=5), now + VALIDITY
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .add_extension(x509.SubjectAlternativeName(_alt_names(hosts)), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    _write_private(
        paths.key,
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )
    paths.cert.write_bytes(cert.public_bytes(pem))
    paths.ca.write_bytes(ca_cert.public_bytes(pem))
    return paths
