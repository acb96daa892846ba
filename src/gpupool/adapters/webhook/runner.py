"""Run the webhook: serving certificate, HTTPS server, registration with the apiserver, shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gpupool.adapters.kubeclient import async_client
from gpupool.adapters.kubernetes.watch_cache import WatchCache
from gpupool.adapters.metrics.http import start_metrics_server
from gpupool.adapters.metrics.webhook import WebhookMetrics
from gpupool.adapters.webhook import register
from gpupool.adapters.webhook.certs import ensure_serving_cert
from gpupool.adapters.webhook.events import KubeTranslationEvents
from gpupool.adapters.webhook.lookups import WEBHOOK_KINDS, KubeLookups
from gpupool.adapters.webhook.mutate import DEFAULT_SCHEDULER
from gpupool.adapters.webhook.server import build_app, serve

log = logging.getLogger("gpupool.webhook")


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    host: str = "0.0.0.0"
    port: int = 9443
    cert_dir: Path = Path("/var/run/gpupool/webhook-certs")
    cert_hosts: tuple[str, ...] = ("127.0.0.1", "localhost")
    kubeconfig: Path | None = None
    # Registration: the URL (or Service) the apiserver dials; None: do not register.
    register_url: str | None = None
    register_service: tuple[str, str, int] | None = None
    namespace_labels: Mapping[str, str] = field(default_factory=dict)
    skip_namespaces: tuple[str, ...] = ("kube-system",)
    unregister_on_exit: bool = False
    name: str = register.NAME
    # The schedulerNames that call gpupool's extender; GPU pods for any other are refused.
    schedulers: tuple[str, ...] = (DEFAULT_SCHEDULER,)
    # Plain-HTTP /metrics (host, port); None: none.
    metrics: tuple[str, int] | None = ("0.0.0.0", 9412)
    # Pods asking for nvidia.com/gpu (or a MIG profile) are gpupool's (docs/hami.md).
    adopt_nvidia_gpu: bool = True


async def run_webhook(config: WebhookConfig, stop: asyncio.Event) -> None:
    cert = ensure_serving_cert(config.cert_dir, config.cert_hosts)
    client = async_client(config.kubeconfig, field_manager=register.FIELD_MANAGER)
    metrics = WebhookMetrics()
    events = KubeTranslationEvents(client)
    cache = WatchCache(client, WEBHOOK_KINDS)  # GpuNodes and GpuQuotas: read for most pods
    caching = asyncio.ensure_future(cache.run(stop))
    app = build_app(
        KubeLookups(client, cache),
        time.time,
        config.schedulers,
        metrics,
        adopt_nvidia_gpu=config.adopt_nvidia_gpu,
        events=events,
    )
    runner = await serve(app, config.host, config.port, cert)
    scrape = (
        await start_metrics_server(metrics.registry, *config.metrics) if config.metrics else None
    )
    registration = None
    try:
        log.info("webhook serving on https://%s:%d", config.host, config.port)
        if config.register_url or config.register_service:
            registration = register.Registration(
                target=register.Target(config.register_url, config.register_service),
                ca_bundle=cert.ca_bundle(),
                name=config.name,
                skip_namespaces=config.skip_namespaces,
                namespace_labels=dict(config.namespace_labels),
                adopt_nvidia_gpu=config.adopt_nvidia_gpu,
            )
            await register.apply(client, registration)
            log.info("registered webhook configurations %r", config.name)
        await stop.wait()
    finally:
        if registration is not None and config.unregister_on_exit:
            try:
                await register.unregister(client, config.name)
                log.info("removed webhook configurations %r", config.name)
            except Exception as err:
                log.warning("could not remove webhook configurations: %s", err)
        caching.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await caching
        await runner.cleanup()
        await events.close()
        if scrape is not None:
            await scrape.cleanup()
        await client.close()
