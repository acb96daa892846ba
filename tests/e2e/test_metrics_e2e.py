"""The metrics layers against a real Prometheus (Debian's `prometheus`), started by the test on a
free port and scraping the dev cluster's controller, webhook and extender and a `gpupool agent`
with fake GPUs on the node a tenant's pod was bound to: after the pod is admitted and bound,
PromQL shows the tenant's use as its GpuQuota status says, the card's allocated bytes as the sum
of its live GpuLeases (on both the agent's and the controller's series), the pod's lease, and a
GpuPool's status as the sums of the controller's card series."""

from __future__ import annotations

import json
import secrets
import shutil
import socket
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.polling import poll_until
from gpupool.domain.units import GiB

if TYPE_CHECKING:
    from conftest import E2ECluster

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        shutil.which("prometheus") is None,
        reason="prometheus not installed (make prometheus installs Debian's package)",
    ),
]

GPUPOOL_API = "/apis/gpupool.io/v1alpha1"
LOOPBACK = "127.0.0.1"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def _query(prom: str, expr: str) -> list[dict[str, Any]]:
    url = f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            body = json.load(resp)
    except OSError:
        return []  # not up yet
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def _value(prom: str, expr: str) -> float | None:
    result = _query(prom, expr)
    return float(result[0]["value"][1]) if len(result) == 1 else None


@pytest.fixture
def tenant_pod(gpupool_cluster: E2ECluster) -> dict[str, Any]:
    """A tenant with a 24Gi GpuQuota and its 12Gi pod, admitted and bound."""
    api = gpupool_cluster.api
    tenant = f"metrics-{secrets.token_hex(3)}"
    api.create(
        f"{GPUPOOL_API}/gpuquotas",
        {"apiVersion": "gpupool.io/v1alpha1", "kind": "GpuQuota", "metadata": {"name": tenant},
         "spec": {"nominal": "24Gi"}},
    )  # fmt: skip
    api.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": tenant, "labels": {"gpupool.io/tenant": tenant}}},
    )  # fmt: skip
    api.create(
        f"/api/v1/namespaces/{tenant}/pods",
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "infer"},
         "spec": {"containers": [{"name": "main", "image": "registry.example/infer:1",
                                  "resources": {"limits": {"gpupool.io/gpu-memory": "12Gi"}}}]}},
    )  # fmt: skip

    def bound() -> dict[str, Any] | None:
        pod: dict[str, Any] = api.get(f"/api/v1/namespaces/{tenant}/pods/infer")
        lease = (pod["metadata"].get("annotations") or {}).get("gpupool.io/lease")
        return pod if pod["spec"].get("nodeName") and lease else None

    pod = poll_until(bound, timeout_s=60)
    assert pod is not None, "the tenant's pod was not admitted and bound within 60 s"
    return pod


@pytest.fixture
def agent(gpupool_cluster: E2ECluster, tenant_pod: dict[str, Any], tmp_path: Path) -> Iterator[str]:
    """`gpupool agent` with the node's fake cards, on the pod's node; yields its metrics URL."""
    port = _free_port()
    node = tenant_pod["spec"]["nodeName"]
    log = (tmp_path / "agent.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpupool.cli.main", "agent", "--node-name", node,
         "--fake-gpus", str(gpupool_cluster.gpus), "--kubeconfig", str(gpupool_cluster.kubeconfig),
         "--device-plugin-dir", str(tmp_path / "plugins"), "--limits-dir", str(tmp_path / "limits"),
         "--usage-dir", str(tmp_path / "usage"),
         "--metrics-address", f"{LOOPBACK}:{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        yield f"{LOOPBACK}:{port}"
    finally:
        _stop(proc)
        log.close()


@pytest.fixture
def prometheus(gpupool_cluster: E2ECluster, agent: str, tmp_path: Path) -> Iterator[str]:
    """A real Prometheus scraping the agent, the controller, the webhook and the extender every
    second."""
    ports = gpupool_cluster.state.ports
    targets = {
        "gpupool-agent": agent,
        "gpupool-controller": f"{LOOPBACK}:{ports['gpupool-controller-metrics']}",
        "gpupool-webhook": f"{LOOPBACK}:{ports['gpupool-webhook-metrics']}",
        "gpupool-extender": f"{LOOPBACK}:{ports['gpupool-extender']}",
    }
    # The dev cluster's extender serves HTTPS (its /metrics needs no client certificate).
    extender_tls = {
        "scheme": "https",
        "tls_config": {"ca_file": str(gpupool_cluster.cluster.pki_dir / "ca.crt")},
    }
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": [target]}]}
            | (extender_tls if job == "gpupool-extender" else {})
            for job, target in targets.items()
        ],
    }
    (tmp_path / "prometheus.yaml").write_text(yaml.safe_dump(config))
    port = _free_port()
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [shutil.which("prometheus") or "prometheus",
         f"--config.file={tmp_path / 'prometheus.yaml'}",
         f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address={LOOPBACK}:{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://{LOOPBACK}:{port}"
    try:
        up = poll_until(
            lambda: _value(url, "count(up == 1)") == len(targets), timeout_s=60, interval_s=0.5
        )
        if not up:
            down = _query(url, "up == 0")
            pytest.fail(f"Prometheus did not scrape all of {targets}; down: {down}; log: "
                        f"{(tmp_path / 'prometheus.log').read_text()[-2000:]}")  # fmt: skip
        yield url
    finally:
        _stop(proc)
        log.close()


def _card_leases(api: KubeApi, uuid: str) -> int:
    """Bytes the live GpuLeases take on card `uuid` (all tenants of the session's cluster)."""
    total = 0
    for lease in api.get(f"{GPUPOOL_API}/gpuleases")["items"]:
        phase = (lease.get("status") or {}).get("phase", "Reserved")
        if phase in ("Released", "Expired", "Lost", "Reclaimed"):
            continue
        total += sum(d["sizeBytes"] for d in lease["spec"]["devices"] if d["uuid"] == uuid)
    return total


def test_prometheus_shows_the_card_and_tenant_series_of_an_admitted_bound_pod(
    gpupool_cluster: E2ECluster, tenant_pod: dict[str, Any], prometheus: str
) -> None:
    api = gpupool_cluster.api
    ns = tenant_pod["metadata"]["namespace"]
    node = tenant_pod["spec"]["nodeName"]
    lease_ns, lease_name = tenant_pod["metadata"]["annotations"]["gpupool.io/lease"].split("/")
    lease = api.get(f"{GPUPOOL_API}/namespaces/{lease_ns}/gpuleases/{lease_name}")
    [device] = lease["spec"]["devices"]
    uuid = device["uuid"]
    card = f'Hostname="{node}",UUID="{uuid}"'

    def tenant_used() -> float | None:
        status = api.get(f"{GPUPOOL_API}/gpuquotas/{ns}").get("status") or {}
        used = _value(prometheus, f'gpupool_controller_tenant_used{{tenant="{ns}"}}')
        return used if used is not None and used == status.get("usedAmount") else None

    assert poll_until(tenant_used, timeout_s=30, interval_s=0.5) == 12 * GiB
    nominal = _value(prometheus, f'gpupool_controller_tenant_nominal{{tenant="{ns}"}}')
    assert nominal == 24 * GiB
    assert _value(prometheus, f'gpupool_controller_tenant_pending_pods{{tenant="{ns}"}}') == 0

    def lease_shown() -> float | None:
        return _value(prometheus, f'gpupool_agent_lease_memory_allocated_bytes{{namespace="{ns}"}}')

    assert poll_until(lease_shown, timeout_s=30, interval_s=0.5) == 12 * GiB

    def card_is_its_leases() -> bool:
        want = _card_leases(api, uuid)
        agent = _value(prometheus, f"gpupool_agent_card_allocated_bytes{{{card}}}")
        controller = _value(prometheus, f"gpupool_controller_card_allocated_bytes{{{card}}}")
        return want >= 12 * GiB and agent == want and controller == want

    assert poll_until(card_is_its_leases, timeout_s=30, interval_s=0.5), (
        f"card {uuid}: leases {_card_leases(api, uuid)}, agent "
        f"{_query(prometheus, f'gpupool_agent_card_allocated_bytes{{{card}}}')}, controller "
        f"{_query(prometheus, f'gpupool_controller_card_allocated_bytes{{{card}}}')}"
    )
    cards = _query(prometheus, f'gpupool_agent_card_healthy{{Hostname="{node}"}} == 1')
    assert len(cards) == gpupool_cluster.gpus.count
    temperature = _value(prometheus, f"gpupool_agent_card_temperature_celsius{{{card}}}")
    assert temperature == 30  # what the fake inventory reports until told otherwise
    frag = _query(prometheus, f"gpupool_controller_card_fragmentation_ratio{{{card}}}")
    assert len(frag) == 1 and 0 <= float(frag[0]["value"][1]) <= 1


def test_gpupool_status_and_the_controllers_new_series_say_what_prometheus_says(
    gpupool_cluster: E2ECluster, tenant_pod: dict[str, Any], prometheus: str
) -> None:
    """A GpuPool over the whole cluster: the controller writes its status, whose capacity and
    allocated bytes equal the sums of the controller's card series in Prometheus (and the
    allocated bytes the live GpuLeases); its CardsFragmented condition is there; the GpuNodes
    by health and the eviction counters (0 from the start) are scraped."""
    api = gpupool_cluster.api
    name = f"metrics-{secrets.token_hex(3)}"
    api.create(
        f"{GPUPOOL_API}/gpupools",
        {"apiVersion": "gpupool.io/v1alpha1", "kind": "GpuPool", "metadata": {"name": name},
         "spec": {}},
    )  # fmt: skip
    try:

        def status_matches() -> dict[str, Any] | None:
            status = api.get(f"{GPUPOOL_API}/gpupools/{name}").get("status") or {}
            capacity = _value(prometheus, "sum(gpupool_controller_card_memory_total_bytes)")
            allocated = _value(prometheus, "sum(gpupool_controller_card_allocated_bytes)")
            leases = sum(
                d["sizeBytes"]
                for le in api.get(f"{GPUPOOL_API}/gpuleases")["items"]
                if (le.get("status") or {}).get("phase", "Reserved")
                not in ("Released", "Expired", "Lost", "Reclaimed")
                for d in le["spec"]["devices"]
            )
            if status.get("allocatedBytes") != allocated or allocated != leases:
                return None
            return status if status.get("capacityBytes") == capacity else None

        status = poll_until(status_matches, timeout_s=30, interval_s=0.5)
        assert status is not None, (
            f"GpuPool {name}: {api.get(f'{GPUPOOL_API}/gpupools/{name}').get('status')}, "
            f"Prometheus {_query(prometheus, 'sum(gpupool_controller_card_allocated_bytes)')}"
        )
        assert status["allocatedBytes"] >= 12 * GiB
        assert status["gpus"] == len(_query(prometheus, "gpupool_controller_card_allocated_bytes"))
        [condition] = [c for c in status["conditions"] if c["type"] == "CardsFragmented"]
        over = _value(prometheus, "count(gpupool_controller_card_fragmentation_ratio > 0.3)")
        assert status["cardsOverThreshold"] == (over or 0)
        assert condition["status"] == ("True" if status["cardsOverThreshold"] else "False")
        gpunodes = len(api.get(f"{GPUPOOL_API}/gpunodes")["items"])
        assert _value(prometheus, "sum(gpupool_controller_nodes)") == gpunodes
        evictions = _query(prometheus, "gpupool_controller_evictions_total")
        assert {e["metric"]["reason"] for e in evictions} >= {"QuotaReclaim", "NodeLost"}
        # the webhook admitted the tenant's pod (and the session's others): counted, and timed
        created = 'gpupool_webhook_requests_total{resource="pods",operation="CREATE"}'
        assert (_value(prometheus, f"sum({created})") or 0) >= 1
        timed = 'gpupool_webhook_request_duration_seconds_count{resource="pods"}'
        assert (_value(prometheus, f"sum({timed})") or 0) >= 1
        # a second tenant: 12Gi nominal, two 12Gi pods; the second waits in the queue series
        other = f"queued-{secrets.token_hex(3)}"
        api.create(
            f"{GPUPOOL_API}/gpuquotas",
            {"apiVersion": "gpupool.io/v1alpha1", "kind": "GpuQuota",
             "metadata": {"name": other}, "spec": {"nominal": "12Gi"}},
        )  # fmt: skip
        api.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": other, "labels": {"gpupool.io/tenant": other}}},
        )  # fmt: skip
        for pod_name in ("first", "second"):
            api.create(
                f"/api/v1/namespaces/{other}/pods",
                {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod_name},
                 "spec": {"containers": [{"name": "main", "image": "registry.example/x:1",
                          "resources": {"limits": {"gpupool.io/gpu-memory": "12Gi"}}}]}},
            )  # fmt: skip

        pending = f'gpupool_controller_tenant_pending_pods{{tenant="{other}"}}'
        held = f'gpupool_controller_tenant_used{{tenant="{other}"}}'

        def queue_shown() -> bool:
            status = api.get(f"{GPUPOOL_API}/gpuquotas/{other}").get("status") or {}
            queued, used = _value(prometheus, pending), _value(prometheus, held)
            return (queued, used) == (1, 12 * GiB) and status.get("queued") == 1

        assert poll_until(queue_shown, timeout_s=30, interval_s=0.5), (
            f"{other}: {api.get(f'{GPUPOOL_API}/gpuquotas/{other}').get('status')}, "
            f"Prometheus {_query(prometheus, pending)}, {_query(prometheus, held)}"
        )
        # `gpupool usage` through the kubeconfig bills the tenant's pod from its GpuLease
        tenant = tenant_pod["metadata"]["namespace"]
        done = subprocess.run(
            [sys.executable, "-m", "gpupool.cli.main", "usage", "--kubeconfig",
             str(gpupool_cluster.kubeconfig), "--by", "pod", "-o", "json"],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        [row] = [r for r in json.loads(done.stdout)["rows"] if r["tenant"] == tenant]
        assert (row["namespace"], row["pod"], row["leases"]) == (tenant, "infer", 1)
        assert row["gibHours"] > 0
    finally:
        api.delete(f"{GPUPOOL_API}/gpupools/{name}")
