"""The charge auditor on the real control plane (`gpupool dev-cluster up`'s stack: the controller
as a process, the GpuNodes its heartbeats keep): GpuLeases made by hand, one charged fewer bytes
than its slice holds, one charged a quarter of a card in milli-GPU for half of it, one charged
what it holds. The controller writes a ChargeMismatch Warning event on each of the two bad
leases and on its pod (once, though the leases move on to Active), none for the good one; its
/metrics reads 1 for each bad lease's tenant and 0 for the good one's, and 0 again once the bad
lease's amount is mended. The test-support audit (`read_cluster`) finds the same two leases.
"""

from __future__ import annotations

import secrets
import urllib.request
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.builders import pod_json

from gpupool.adapters.kubernetes.audit import read_cluster
from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.polling import poll_until
from gpupool.devcluster.ports import LOOPBACK

if TYPE_CHECKING:
    from conftest import E2ECluster

pytestmark = pytest.mark.e2e

GROUP = "/apis/gpupool.io/v1alpha1"
GiB = 2**30
REASON = "ChargeMismatch"
METRIC = "gpupool_controller_lease_charge_mismatches"


def _devices(api: KubeApi) -> tuple[str, list[dict[str, Any]]] | None:
    """A GpuNode with at least three cards reported: its name and devices by index."""
    for gpunode in api.get(f"{GROUP}/gpunodes")["items"]:
        devices = (gpunode.get("status") or {}).get("devices") or []
        if len(devices) >= 3:
            return gpunode["metadata"]["name"], sorted(devices, key=lambda d: d["index"])
    return None


def _mismatches(metrics_url: str) -> dict[str, float]:
    """The controller's gauge by tenant, as /metrics shows it now ({} when it cannot answer)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(metrics_url, timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return {}
    return {
        s.labels["tenant"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == METRIC
    }


def _events(api: KubeApi, ns: str) -> list[tuple[str, str, str]]:
    """The namespace's ChargeMismatch events: (kind, name, message)."""
    items = api.get(f"/api/v1/namespaces/{ns}/events")["items"]
    return [
        (e["involvedObject"]["kind"], e["involvedObject"]["name"], e["message"])
        for e in items
        if e["reason"] == REASON
    ]


@pytest.fixture
def namespace(gpupool_cluster: E2ECluster) -> Iterator[str]:
    api = gpupool_cluster.api
    ns = f"charge-{secrets.token_hex(3)}"
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                      "metadata": {"name": ns}})  # fmt: skip
    try:
        yield ns
    finally:
        for lease in api.get(f"{GROUP}/namespaces/{ns}/gpuleases")["items"]:
            api.delete(f"{GROUP}/namespaces/{ns}/gpuleases/{lease['metadata']['name']}")
        api.delete(f"/api/v1/namespaces/{ns}")


def test_the_controller_flags_hand_made_leases_charged_other_than_they_hold(
    gpupool_cluster: E2ECluster, namespace: str
) -> None:
    api, ns = gpupool_cluster.api, namespace
    found = poll_until(lambda: _devices(api), timeout_s=30)
    assert found is not None, "no GpuNode reports its cards"
    node, cards = found
    half = int(cards[1]["allocatableBytes"]) // 2  # half of card 1, as placement sizes it
    token = secrets.token_hex(2)
    tenants = {"under": f"under-{token}", "quarter": f"quarter-{token}", "fair": f"fair-{token}"}

    def made(name: str, card: dict[str, Any], size: int, amount: int, resource: str) -> str:
        """A pod bound to `node` (no GPU asked: nothing else touches it) and, by hand, a
        GpuLease of `size` bytes on `card` for it, charged `amount` in `resource`."""
        pod = api.create(f"/api/v1/namespaces/{ns}/pods", pod_json(name, node_name=node, grace_s=0))
        uid = pod["metadata"]["uid"]
        api.create(f"{GROUP}/namespaces/{ns}/gpuleases", {
            "apiVersion": "gpupool.io/v1alpha1", "kind": "GpuLease",
            "metadata": {"name": uid, "namespace": ns},
            "spec": {
                "tenant": tenants[name], "podRef": {"namespace": ns, "name": name, "uid": uid},
                "node": node, "resource": resource, "amount": amount,
                "devices": [{"uuid": card["uuid"], "index": card["index"], "model": card["model"],
                             "offsetBytes": 0, "sizeBytes": size}],
            },
        })  # fmt: skip
        return str(uid)

    under = made("under", cards[0], 12 * GiB, 8 * GiB, "gpu-memory")
    quarter = made("quarter", cards[1], half, 250, "gpu")
    fair = made("fair", cards[2], 12 * GiB, 12 * GiB, "gpu-memory")

    def both_reported() -> list[tuple[str, str, str]] | None:
        events = _events(api, ns)
        named = {(kind, name) for kind, name, _ in events}
        wanted = {("GpuLease", under), ("Pod", "under"), ("GpuLease", quarter), ("Pod", "quarter")}
        return events if wanted <= named else None

    events = poll_until(both_reported, timeout_s=60, interval_s=0.5)
    assert events is not None, _events(api, ns)
    messages = {name: message for _, name, message in events}
    assert messages[under].startswith(f"GpuLease {ns}/{under} is charged 8Gi but holds 12Gi")
    assert cards[0]["uuid"] in messages[under] and "spec.amount" in messages[under]
    assert messages[quarter].startswith(f"GpuLease {ns}/{quarter} is charged 250m but holds 500m")
    assert messages["under"] == messages[under]  # the pod's event says the same

    url = f"http://{LOOPBACK}:{gpupool_cluster.state.ports['gpupool-controller-metrics']}/metrics"
    expected = {tenants["under"]: 1.0, tenants["quarter"]: 1.0, tenants["fair"]: 0.0}

    def shown() -> dict[str, float] | None:
        now = _mismatches(url)
        return now if {t: now.get(t) for t in expected} == expected else None

    assert poll_until(shown, timeout_s=30, interval_s=0.5), _mismatches(url)

    # The test-support audit over the same objects agrees with the controller
    audit = read_cluster(api.get, ns)
    assert {v.subject for v in audit.of_kind("charge-mismatch")} == {
        f"{ns}/{under}", f"{ns}/{quarter}"}, str(audit)  # fmt: skip

    # The leases move on (Reserved -> Active: new resourceVersions) without a second event, and
    # the fair lease never gets one.
    def active() -> bool:
        leases = api.get(f"{GROUP}/namespaces/{ns}/gpuleases")["items"]
        return len(leases) == 3 and all(
            (le.get("status") or {}).get("phase") == "Active" for le in leases
        )

    assert poll_until(active, timeout_s=30), api.get(f"{GROUP}/namespaces/{ns}/gpuleases")
    assert not [e for e in _events(api, ns) if e[1] in (fair, "fair")]

    # Mended by hand: its tenant reads 0 again
    api.patch(f"{GROUP}/namespaces/{ns}/gpuleases/{under}", {"spec": {"amount": 12 * GiB}})
    expected[tenants["under"]] = 0.0
    assert poll_until(shown, timeout_s=30, interval_s=0.5), _mismatches(url)
    # the rounds since (the leases' moves to Active, the mend) reported nothing twice
    assert len(_events(api, ns)) == 4, _events(api, ns)
