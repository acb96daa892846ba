"""The webhook's TLS: a private CA and a serving certificate for the names the apiserver dials.

The apiserver only calls webhooks over HTTPS and checks the serving certificate against the
`caBundle` of the webhook configuration, so the webhook writes `ca.crt` (the bundle), `tls.crt`
and `tls.key` into its certificate folder. Existing files are reused while they cover the
requested names and stay valid for another day; otherwise a fresh CA and certificate replace them.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from gpupool.adapters.tls import Authority, name, write_cert, write_key


@dataclass(frozen=True, slots=True)
class ServingCert:
    ca: Path
    cert: Path
    key: Path

    def ca_bundle(self) -> bytes:
        return self.ca.read_bytes()


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
    ca = Authority("gpupool-webhook-ca", now)
    ips = tuple(h for h in hosts if _is_ip(h))
    dns = tuple(h for h in hosts if not _is_ip(h))
    cert, key = ca.issue(name(hosts[0]), server=True, dns_names=dns, ips=ips)
    write_key(paths.key, key)
    write_cert(paths.cert, cert)
    write_cert(paths.ca, ca.cert)
    return paths


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
