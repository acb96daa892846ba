"""gpupool on top of the dev cluster, as admin: the CRDs, deploy/rbac, deploy/policies, an
identity (client certificate and kubeconfig) per gpupool process for its ServiceAccount, and,
once the webhook answers, its registration; then the wait until every gpupool process is ready.

The webhook's configurations are applied by admin, not the webhook: its own role cannot write
them (a webhook able to rewrite its rules could widen what it intercepts)."""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from pathlib import Path

from gpupool.devcluster import rbac, readiness
from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.certs import issue_client
from gpupool.devcluster.kubeconfig import write_kubeconfig
from gpupool.devcluster.patience import Reading
from gpupool.devcluster.ports import LOOPBACK
from gpupool.devcluster.processes import ProcessRecord

WEBHOOK_NAME = "gpupool"  # adapters.webhook.register.NAME
WEBHOOK_CERT_HOSTS = ("127.0.0.1", "localhost")  # `gpupool webhook serve`'s default
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

Wait = Callable[[ProcessRecord, float, Callable[[], bool]], None]
# A count's wait: (process, what is counted, probe), with the allowance bound by the caller.
WaitCount = Callable[[ProcessRecord, str, Callable[[], Reading | None]], None]


def create_crds(api: KubeApi) -> list[str]:
    from gpupool.adapters.kubernetes.crds import load_crds

    names = []
    for crd in load_crds():
        api.create(CRDS, crd)
        names.append(str(crd["metadata"]["name"]))
    return names


def apply_rbac(api: KubeApi) -> None:
    """deploy/rbac (and the fake agents' one extra right)."""
    rbac.apply(api, [*rbac.load_rbac(), *rbac.FAKE_AGENT_RBAC])


def apply_policies(api: KubeApi) -> None:
    """deploy/policies (gpupool's marks on pods are gpupool's own)."""
    from gpupool.adapters.webhook import policy

    for obj in policy.objects():
        api.create_or_replace(obj)


def write_identities(pki_dir: Path, server: str, kubeconfig: Callable[[str], Path]) -> None:
    """A client certificate and kubeconfig (at `kubeconfig(component)`) per gpupool process."""
    for component, account in rbac.COMPONENT_ACCOUNTS.items():
        user = rbac.service_account_user(account)
        pair = issue_client(pki_dir, component, user, rbac.service_account_groups())
        write_kubeconfig(
            kubeconfig(component), server, pki_dir / "ca.crt", pair.cert, pair.key, user
        )


def register_webhook(api: KubeApi, url: str, cert_dir: Path) -> None:
    from gpupool.adapters.webhook import register as registration

    reg = registration.Registration(
        target=registration.Target(url=url),
        ca_bundle=(cert_dir / "ca.crt").read_bytes(),
        name=WEBHOOK_NAME,
    )
    for config in registration.configurations(reg):
        api.create_or_replace(config)


def wait_ready(
    api: KubeApi,
    started: Mapping[str, ProcessRecord],
    ports: Mapping[str, int],
    nodes: list[str],
    dirs: tuple[Path, Path],
    wait: Wait,
    timeout_s: float,
    wait_count: WaitCount,
) -> None:
    """Ready: the extender answers /healthz (its cache is synced), the webhook answers /healthz
    (then it is registered), every fake GPU node has a GpuNode with a heartbeat, the controller
    still runs and the web view answers /healthz (it has read the cluster). `dirs`: the
    cluster's pki folder and the webhook's certificate folder. `timeout_s` bounds each yes/no
    wait; `wait_count` waits for the GpuNodes while their count grows."""
    pki_dir, cert_dir = dirs
    if "gpupool-extender" in started:
        url = f"https://{LOOPBACK}:{ports['gpupool-extender']}/healthz"
        ca = ssl.create_default_context(cafile=str(pki_dir / "ca.crt"))
        wait(started["gpupool-extender"], timeout_s, lambda: readiness.http_ok(url, ca))
    if "gpupool-webhook" in started:
        base = f"https://{LOOPBACK}:{ports['gpupool-webhook']}"
        context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
        healthz = f"{base}/healthz"
        wait(started["gpupool-webhook"], timeout_s, lambda: readiness.http_ok(healthz, context))
        register_webhook(api, base, cert_dir)
    if "gpupool-heartbeat" in started:
        beating = started["gpupool-heartbeat"]
        wait_count(beating, "GpuNodes beating", lambda: readiness.gpunodes_beating(api, nodes))
    if "gpupool-controller" in started:
        wait(started["gpupool-controller"], timeout_s, lambda: True)
    if "gpupool-web" in started:
        web = f"http://{LOOPBACK}:{ports['gpupool-web']}/healthz"
        wait(started["gpupool-web"], timeout_s, lambda: readiness.http_ok(web))
