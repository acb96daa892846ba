"""The metrics layers against a real Prometheus (Debian's `prometheus`), started by the test on a
free port and scraping the dev cluster's controller, webhook and extender and a `gpupool agent`
with fake GPUs on the node a tenant's pod was bound to: after the pod is admitted and bound,
PromQL shows the tenant's use as its GpuQuota status says, the card's allocated bytes as the sum
of its live GpuLeases (on both the agent's and the controller's series), the pod's lease, a
GpuPool's status as the sums of the controller's card series, every panel query of both Grafana
boards (variables expanded to the workload's tenant, namespace and node) returning series, and a
fragmented card's rate equal to the definition computed from its GpuLeases."""

from __future__ import annotations

import json
import math
import re
import secrets
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from gpupool.adapters.kubernetes.pod_view import read_pod
from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.errors import ApiError
from gpupool.devcluster.polling import poll_until
from gpupool.devcluster.ports import free_port
from gpupool.domain.requests import MILLI
from gpupool.domain.units import GiB
from gpupool.placement.workload import TargetWorkload

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
BOARDS = sorted((Path(__file__).parents[2] / "deploy" / "grafana").glob("*.json"))
ENDED = ("Released", "Expired", "Lost", "Reclaimed")


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
    port = free_port()
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
    port = free_port()
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


def _card_devices(api: KubeApi, uuid: str) -> list[dict[str, Any]]:
    """The devices of the live GpuLeases on card `uuid` (all tenants of the session's cluster)."""
    return [
        d
        for lease in api.get(f"{GPUPOOL_API}/gpuleases")["items"]
        if (lease.get("status") or {}).get("phase", "Reserved") not in ENDED
        for d in lease["spec"]["devices"]
        if d["uuid"] == uuid
    ]


def _card_leases(api: KubeApi, uuid: str) -> int:
    """Bytes the live GpuLeases take on card `uuid`."""
    return sum(d["sizeBytes"] for d in _card_devices(api, uuid))


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


def _tenant(api: KubeApi, name: str, spec: dict[str, Any]) -> None:
    api.create(
        f"{GPUPOOL_API}/gpuquotas",
        {"apiVersion": "gpupool.io/v1alpha1", "kind": "GpuQuota", "metadata": {"name": name},
         "spec": spec},
    )  # fmt: skip
    api.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": name, "labels": {"gpupool.io/tenant": name}}},
    )  # fmt: skip


def _gpu_pod(api: KubeApi, ns: str, name: str, memory: str, compute: str | None = None) -> None:
    limits = {"gpupool.io/gpu-memory": memory} | (
        {"gpupool.io/gpu-compute": compute} if compute else {}
    )
    api.create(
        f"/api/v1/namespaces/{ns}/pods",
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
         "spec": {"containers": [{"name": "main", "image": "registry.example/x:1",
                  "resources": {"limits": limits}}]}},
    )  # fmt: skip


def _expected_fragmentation(api: KubeApi, uuid: str, model: str, total: int) -> float:
    """The card's rate by its definition (docs/metrics.md, `fgd_card`), from the cluster's
    objects: the common requests are the shapes of the GPU pods not yet ended (95% popularity
    cut-off); the card's free share is the smaller of its free memory share (total less its
    live GpuLeases' bytes) and its free compute; a common request finds the card fragmented
    when that share is below what it needs there, and the card's rate is the weighted free
    share so lost ÷ the card."""
    views = [read_pod(p) for p in api.get("/api/v1/pods")["items"]]
    requests = [v.request for v in views if v.request is not None and not v.terminal]
    common = TargetWorkload.from_requests([r for r in requests if r.wants_gpu])
    devices = _card_devices(api, uuid)
    free_bytes = total - sum(d["sizeBytes"] for d in devices)
    free_compute = MILLI - sum(10 * int(d.get("computePercent", 0)) for d in devices)
    share_free = min(free_compute, free_bytes * MILLI // total)
    lost = 0.0
    for shape, weight in zip(common.shapes, common.weights, strict=True):
        if shape.models and model not in shape.models:
            need = math.inf  # this request never goes on this card: all its free share is lost
        elif shape.gpu_milli:
            need = shape.gpu_milli
        else:
            need = max(-(-shape.gpu_memory_bytes * MILLI // total), shape.compute_milli)
        if share_free < need:
            lost += weight * share_free
    return lost / (sum(common.weights) * MILLI)


def _panel_queries() -> list[tuple[str, str, str]]:
    """(board, panel title, expression) of every query of both boards."""
    return [
        (path.stem, panel["title"], target["expr"])
        for path in BOARDS
        for panel in json.loads(path.read_text())["panels"]
        for target in panel["targets"]
    ]


# What a kwok node cannot produce: no container runs there, so no limiter writes the memory a
# lease really uses (shown on the real node: docs/metrics.md, "Proven against a real Prometheus").
NO_LIMITER_HERE = "gpupool_agent_lease_memory_used_bytes"


def test_every_panel_query_returns_series_and_a_fragmented_cards_rate_is_its_definition(
    gpupool_cluster: E2ECluster, tenant_pod: dict[str, Any], prometheus: str
) -> None:
    """A tenant with a budget and three pods while Prometheus scrapes: a 50Gi one (its card, 72Gi
    as placement counts it, keeps at most 22Gi free, too little for another of its size:
    fragmented), a 12Gi one, and a 12Gi one that waits over its 62Gi nominal; a pod the webhook
    denies. Then every panel's
    query, with `$tenant` that tenant, `$namespace` the agent's node's tenant and `$node` the
    agent's node (values their variables' own queries list), returns at least one series, and
    the 50Gi pod's card's fragmentation in Prometheus is what the definition gives from its
    leases and the cluster's pods."""
    api = gpupool_cluster.api
    tenant = f"boards-{secrets.token_hex(3)}"
    _tenant(api, tenant, {"nominal": "62Gi",
                          "budget": {"limitHours": 1000, "windowSeconds": 86400}})  # fmt: skip
    for name, memory in (("big", "50Gi"), ("small", "12Gi"), ("late", "12Gi")):
        _gpu_pod(api, tenant, name, memory)
        if name == "small":  # "late" comes after both are admitted: it is the one that waits

            def both_bound() -> bool:
                pods = [api.get(f"/api/v1/namespaces/{tenant}/pods/{n}") for n in ("big", "small")]
                return all(p["spec"].get("nodeName") for p in pods)

            assert poll_until(both_bound, timeout_s=60, interval_s=0.5), f"{tenant}: not bound"
    with pytest.raises(ApiError, match="gpu-compute"):  # the webhook denies it (1..100)
        _gpu_pod(api, tenant, "bad", "12Gi", compute="150")

    values = {
        "tenant": tenant,
        "namespace": tenant_pod["metadata"]["namespace"],
        "node": tenant_pod["spec"]["nodeName"],
    }
    for variable, query in (
        ("tenant", "gpupool_controller_tenant_used"),
        ("namespace", "gpupool_agent_lease_memory_allocated_bytes"),
        ("node", "gpupool_agent_card_healthy"),
    ):  # each value is one its variable's label_values query lists
        label = {"node": "Hostname"}.get(variable, variable)

        def listed(q: str = query, name: str = label) -> set[str]:
            return {r["metric"][name] for r in _query(prometheus, q)}

        def shown(v: str = variable) -> bool:
            return values[v] in listed()

        assert poll_until(shown, timeout_s=30, interval_s=0.5), (
            f"${variable}: {values[variable]} not in {listed()}"
        )

    def expand(expr: str) -> str:
        return re.sub(r"\$\{?(\w+)\}?", lambda m: values[m.group(1)], expr)

    queries = [(b, t, expand(e)) for b, t, e in _panel_queries() if NO_LIMITER_HERE not in e]
    assert len(queries) >= 30  # both boards, less the two targets of really used memory

    def every_query_has_series() -> bool:
        return all(_query(prometheus, e) for _, _, e in queries)

    assert poll_until(every_query_has_series, timeout_s=60, interval_s=1), (
        "panel queries with no series: "
        + "; ".join(f"{b}/{t}: {e}" for b, t, e in queries if not _query(prometheus, e))
    )
    late = f'gpupool_controller_tenant_pending_pods{{tenant="{tenant}"}}'
    assert poll_until(lambda: _value(prometheus, late) == 1, timeout_s=30, interval_s=0.5)

    pod = api.get(f"/api/v1/namespaces/{tenant}/pods/big")
    lease_ns, lease_name = pod["metadata"]["annotations"]["gpupool.io/lease"].split("/")
    [device] = api.get(f"{GPUPOOL_API}/namespaces/{lease_ns}/gpuleases/{lease_name}")["spec"][
        "devices"
    ]
    card = f'Hostname="{pod["spec"]["nodeName"]}",UUID="{device["uuid"]}"'
    total = _value(prometheus, f"gpupool_controller_card_memory_total_bytes{{{card}}}")
    assert total is not None and total >= 50 * GiB
    rate = f'gpupool_controller_card_fragmentation_ratio{{{card},measure="fgd_card"}}'

    def rate_is_the_definition() -> tuple[float, float] | None:
        want = _expected_fragmentation(api, device["uuid"], device["model"], int(total))
        got = _value(prometheus, rate)
        return (got, want) if got is not None and got == pytest.approx(want, rel=1e-9) else None

    matched = poll_until(rate_is_the_definition, timeout_s=30, interval_s=0.5)
    assert matched is not None, (
        f"card {card}: Prometheus {_query(prometheus, rate)}, definition "
        f"{_expected_fragmentation(api, device['uuid'], device['model'], int(total))}"
    )
    assert matched[1] > 0, (  # the 50Gi pod left its card fragmented for a request of its size
        f"card {card} of {total} bytes: {_card_devices(api, device['uuid'])}"
    )
