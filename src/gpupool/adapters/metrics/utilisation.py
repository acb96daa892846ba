"""The autoscaler's signal (`ports.UtilisationSource`): each pod's GPU utilisation, from the node
agents' /metrics or from Prometheus.

A pod's figure is the utilisation of the cards its lease holds slices on, averaged over those
cards: the agent's `gpupool_agent_card_utilization_ratio` (NVML's SM-busy share) joined on
`UUID` with the pod's `gpupool_agent_lease_memory_allocated_bytes` series. On a card shared by
several pods every pod sees the card's figure (per-process attribution is not exported yet,
docs/autoscaling.md).

`AgentScrapeSource` scrapes the agents of the pods' nodes (`--autoscale-agent-url`, a template
with `{node}` and `{address}`); `PrometheusSource` asks a Prometheus that scrapes them
(`--autoscale-prometheus`) the same join in PromQL. A node or a Prometheus that does not answer
leaves its pods without a figure (the plan then holds), never at 0.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from gpupool.ports import PodPlace

log = logging.getLogger("gpupool.controller.autoscale")

CARD_UTILISATION = "gpupool_agent_card_utilization_ratio"
LEASE_SLICE = "gpupool_agent_lease_memory_allocated_bytes"
DEFAULT_AGENT_URL = "http://{address}:9410/metrics"
# per (namespace, pod): the average over its cards of the card's utilisation, 0-1
POD_QUERY = (
    f"avg by (namespace, pod) (max by (namespace, pod, UUID) ({LEASE_SLICE}) * 0 "
    f"+ on (UUID) group_left () max by (UUID) ({CARD_UTILISATION}))"
)
_TIMEOUT = aiohttp.ClientTimeout(total=5.0)


def pod_utilisation_from_exposition(text: str) -> dict[str, float]:
    """Percent per `namespace/pod` from one agent's exposition text."""
    cards: dict[str, float] = {}
    slices: dict[str, set[str]] = defaultdict(set)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == CARD_UTILISATION and "UUID" in labels:
                cards[labels["UUID"]] = float(sample.value)
            elif sample.name == LEASE_SLICE and {"namespace", "pod", "UUID"} <= labels.keys():
                slices[f"{labels['namespace']}/{labels['pod']}"].add(labels["UUID"])
    out: dict[str, float] = {}
    for pod, uuids in slices.items():
        known = [cards[u] for u in uuids if u in cards]
        if known:
            out[pod] = 100.0 * sum(known) / len(known)
    return out


def agent_url(template: str, place: PodPlace) -> str:
    return template.format(node=place.node, address=place.address or place.node)


class AgentScrapeSource:
    def __init__(self, session: aiohttp.ClientSession, template: str = DEFAULT_AGENT_URL) -> None:
        self.session = session
        self.template = template

    async def _scrape(self, url: str) -> dict[str, float]:
        try:
            async with self.session.get(url, timeout=_TIMEOUT) as response:
                response.raise_for_status()
                return pod_utilisation_from_exposition(await response.text())
        except (aiohttp.ClientError, TimeoutError, ValueError) as err:
            log.warning("no GPU utilisation from the agent at %s: %s", url, err)
            return {}

    async def pod_utilisation(self, pods: Sequence[PodPlace]) -> Mapping[str, float]:
        urls = sorted({agent_url(self.template, p) for p in pods})
        wanted = {p.key for p in pods}
        out: dict[str, float] = {}
        for figures in await asyncio.gather(*(self._scrape(u) for u in urls)):
            out.update((k, v) for k, v in figures.items() if k in wanted)
        return out


def pod_utilisation_from_query(body: Mapping[str, object]) -> dict[str, float]:
    """Percent per `namespace/pod` from a Prometheus instant-query answer (a vector of 0-1)."""
    if body.get("status") != "success":
        raise ValueError(f"Prometheus answered {body.get('status')}: {body.get('error')}")
    data = body.get("data")
    if not isinstance(data, Mapping) or data.get("resultType") != "vector":
        raise ValueError("Prometheus answered no vector")
    out: dict[str, float] = {}
    for item in data.get("result") or ():
        metric: Mapping[str, str] = item.get("metric") or {}
        value: Sequence[object] = item.get("value") or ()
        if "namespace" in metric and "pod" in metric and len(value) == 2:
            out[f"{metric['namespace']}/{metric['pod']}"] = 100.0 * float(str(value[1]))
    return out


class PrometheusSource:
    def __init__(self, session: aiohttp.ClientSession, base_url: str) -> None:
        self.session = session
        self.url = base_url.rstrip("/") + "/api/v1/query"

    async def pod_utilisation(self, pods: Sequence[PodPlace]) -> Mapping[str, float]:
        try:
            async with self.session.get(
                self.url, params={"query": POD_QUERY}, timeout=_TIMEOUT
            ) as response:
                figures = pod_utilisation_from_query(await response.json(content_type=None))
        except (aiohttp.ClientError, TimeoutError, ValueError, AttributeError) as err:
            log.warning("no GPU utilisation from Prometheus at %s: %s", self.url, err)
            return {}
        wanted = {p.key for p in pods}
        return {k: v for k, v in figures.items() if k in wanted}
