"""The webhook's /metrics through its real HTTPS server and the real metrics HTTP server: each
AdmissionReview is counted by resource, operation and result, timed, and each denial counted
by its reason (the kind of bad input, or why the webhook could not judge)."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from gpupool.adapters.metrics.http import start_metrics_server
from gpupool.adapters.metrics.webhook import WebhookMetrics
from gpupool.adapters.webhook.certs import ensure_serving_cert
from gpupool.adapters.webhook.server import MUTATE_PODS, VALIDATE_QUOTAS, build_app, serve
from gpupool.adapters.wire import names
from gpupool.domain.units import GiB
from gpupool.quota.spec import TenantQuota


class Lookups:
    """The webhook's `Lookups` (our interface): one tenant namespace, no quotas, one card; a
    namespace named `down` cannot be read, as with an unreachable API server."""

    async def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        if namespace == "down":
            raise ConnectionError("[Errno 111] Connection refused")
        return {names.LABEL_TENANT: "team-a"}

    async def quotas(self) -> list[TenantQuota]:
        return []

    async def cards(self) -> tuple[tuple[str, int], ...]:
        return (("A100-80GB", 72 * GiB),)

    async def lease_ttl(self, tenant: str) -> float | None:
        return None


def _review(obj: dict[str, Any], namespace: str, operation: str = "CREATE") -> bytes:
    request = {"uid": "u1", "operation": operation, "namespace": namespace, "object": obj}
    return json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    ).encode()


def _pod(memory: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a"},
        "spec": {
            "containers": [
                {"name": "main", "resources": {"limits": {"gpupool.io/gpu-memory": memory}}}
            ]
        },
    }


QUOTA_BAD = {"apiVersion": "gpupool.io/v1alpha1", "kind": "GpuQuota",
             "metadata": {"name": "q"}, "spec": {"nominal": "lots"}}  # fmt: skip


def test_requests_latency_and_denials_by_reason(tmp_path: Path) -> None:
    async def run() -> str:
        cert = ensure_serving_cert(tmp_path, ("127.0.0.1",))
        metrics = WebhookMetrics()
        app = build_app(Lookups(), lambda: 1_767_225_600.0, metrics=metrics)
        webhook = await serve(app, "127.0.0.1", 0, cert)
        scrape = await start_metrics_server(metrics.registry, "127.0.0.1", 0)
        assert scrape is not None
        try:
            port = webhook.addresses[0][1]
            tls = ssl.create_default_context(cafile=str(cert.ca))
            posts = [
                (MUTATE_PODS, _review(_pod("12Gi"), "team-a")),  # allowed
                (MUTATE_PODS, _review(_pod("12Gi"), "team-a", "UPDATE")),  # allowed, no check
                (MUTATE_PODS, _review(_pod("500Gi"), "team-a")),  # more than any card
                (MUTATE_PODS, _review(_pod("twelve"), "team-a")),  # not a quantity
                (MUTATE_PODS, _review(_pod("12Gi"), "down")),  # the namespace cannot be read
                (VALIDATE_QUOTAS, _review(QUOTA_BAD, "")),
                (MUTATE_PODS, b"not json"),
            ]
            async with aiohttp.ClientSession() as session:
                for path, body in posts:
                    url = f"https://127.0.0.1:{port}{path}"
                    async with session.post(url, data=body, ssl=tls) as resp:
                        assert resp.status in (200, 400)
                host, mport = scrape.addresses[0][:2]
                async with session.get(f"http://{host}:{mport}/metrics") as resp:
                    return await resp.text()
        finally:
            await webhook.cleanup()
            await scrape.cleanup()

    text = asyncio.run(run())
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }

    def value(name: str, **labels: str) -> float:
        return samples.get((name, tuple(sorted(labels.items()))), 0.0)

    requests = "gpupool_webhook_requests_total"
    assert value(requests, resource="pods", operation="CREATE", result="allowed") == 1
    assert value(requests, resource="pods", operation="UPDATE", result="allowed") == 1
    assert value(requests, resource="pods", operation="CREATE", result="denied") == 3
    assert value(requests, resource="gpuquotas", operation="CREATE", result="denied") == 1
    assert value(requests, resource="pods", operation="unknown", result="malformed") == 1
    denials = "gpupool_webhook_denials_total"
    assert value(denials, resource="pods", reason="RequestExceedsCluster") == 1
    assert value(denials, resource="pods", reason="InvalidQuantity") == 1
    assert value(denials, resource="pods", reason="NamespaceUnreadable") == 1
    assert value(denials, resource="gpuquotas", reason="InvalidQuota") == 1
    assert value("gpupool_webhook_request_duration_seconds_count", resource="pods") == 6
    assert value("gpupool_webhook_request_duration_seconds_count", resource="gpuquotas") == 1
