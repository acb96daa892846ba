"""The extender's scheduling series through the real aiohttp app on a loopback port: filter's
refused nodes and refused binds counted per reason (`gpupool_extender_refusals_total`) and
prioritize's scores (`gpupool_extender_node_scores_total`), read back from its /metrics as
Prometheus would."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families
from support.builders import node_json, pod_json

from gpupool.adapters.extender_http.filter import REASON_LABELS
from gpupool.adapters.extender_http.server import make_app
from gpupool.adapters.extender_http.service import Extender
from gpupool.adapters.extender_http.wire import ExtenderArgs
from gpupool.adapters.kubernetes.lease import lease_from_json, lease_to_json
from gpupool.adapters.kubernetes.node import read_node
from gpupool.domain.allocations import Slice
from gpupool.domain.units import GiB
from gpupool.state.cluster import ClusterCache
from gpupool.state.lease import LeaseRecord, PodRef

NAMES = ["free", "full", "ghost"]  # "full" has 70 GiB of 80 taken; "ghost" is no node it knows


def _cache() -> ClusterCache:
    record = LeaseRecord(
        name="uid-big",
        namespace="t",
        tenant="t",
        pod=PodRef("t", "big", "uid-big"),
        node="full",
        slices=(Slice(0, "GPU-full-0", "A100-80GB", 0, 70 * GiB, 0),),
        amount=70 * GiB,
    )
    cache = ClusterCache()
    cache.rebuild(
        [read_node(node_json(n, cards=1)) for n in ("free", "full")],
        [],
        [lease_from_json(lease_to_json(record))],
    )
    return cache


def _pod(name: str, gpu_memory: str) -> dict[str, Any]:
    return pod_json(name, namespace="t", uid=f"uid-{name}", gpu_memory=gpu_memory, vgpu=1)


async def _calls(
    calls: list[tuple[str, dict[str, Any]]], **app: Any
) -> tuple[list[Any], dict[str, float]]:
    """The replies to `calls` (verb, pod) over NAMES, then the extender's series by name+labels;
    `app`: make_app's keywords."""
    runner = web.AppRunner(make_app(Extender(_cache(), policy="binpack"), **app), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    replies: list[Any] = []
    try:
        async with aiohttp.ClientSession() as session:
            for verb, pod in calls:
                body = json.dumps(
                    _binding(pod) if verb == "bind" else {"Pod": pod, "NodeNames": NAMES}
                ).encode()
                async with session.post(f"{url}/gpupool/{verb}", data=body) as resp:
                    assert resp.status == 200
                    replies.append(json.loads(await resp.read()))
            async with session.get(f"{url}/metrics") as resp:
                text = await resp.text()
    finally:
        await runner.cleanup()
    series = {
        f"{s.name}{sorted(s.labels.items())}": s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith(
            (
                "gpupool_extender_refusals",
                "gpupool_extender_node_scores",
                "gpupool_extender_binds",
                "gpupool_extender_picks",
            )
        )
    }
    return replies, series


def _binding(pod: dict[str, Any]) -> dict[str, Any]:
    meta = pod["metadata"]
    return {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"],
            "Node": "free"}  # fmt: skip


def _refused(series: dict[str, float], reason: str, verb: str = "filter") -> float:
    key = f"gpupool_extender_refusals_total{sorted({'verb': verb, 'reason': reason}.items())}"
    return series[key]


def test_filter_counts_the_refused_nodes_per_reason() -> None:
    calls = [("filter", _pod("p1", "20Gi")), ("filter", _pod("p2", "30Gi"))]
    replies, series = asyncio.run(_calls(calls))
    for reply in replies:  # what the counters must agree with
        assert reply["NodeNames"] == ["free"]
        assert set(reply["FailedNodes"]) == {"full"}
        assert set(reply["FailedAndUnresolvableNodes"]) == {"ghost"}
    assert _refused(series, "GpuMemory") == 2  # "full", once per call
    assert _refused(series, "UnknownNode") == 2  # "ghost", once per call
    shown = {k for k, v in series.items() if k.startswith("gpupool_extender_refusals_total")}
    assert len(shown) > len(REASON_LABELS)  # every reason there from the start
    moved = {k for k in shown if series[k]}
    assert len(moved) == 2  # and only these two moved


def test_a_pod_refused_everywhere_counts_its_own_reason_on_every_node() -> None:
    _, series = asyncio.run(_calls([("filter", _pod("bad", "lots"))]))
    assert _refused(series, "BadRequest") == len(NAMES)
    assert _refused(series, "GpuMemory") == 0 and _refused(series, "UnknownNode") == 0


def test_prioritize_counts_the_nodes_given_each_score() -> None:
    replies, series = asyncio.run(_calls([("prioritize", _pod("p1", "20Gi"))]))
    given = {h["Host"]: h["Score"] for h in replies[0]}
    scores = {k: v for k, v in series.items() if k.startswith("gpupool_extender_node_scores_total")}
    assert len(scores) == 11  # 0..10, each shown
    assert sum(scores.values()) == len(NAMES)
    for score in set(given.values()):
        key = f"gpupool_extender_node_scores_total{[('score', str(score))]}"
        assert scores[key] == sum(1 for s in given.values() if s == score)
    assert given["ghost"] == 0


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # closed again: a leader that is not there


@pytest.mark.parametrize(
    ("app", "reason", "words"),
    [
        ({}, "NoApiClient", "no API client"),  # an extender built without a client
        ({"is_leader": lambda: False}, "NotLeader", "not the leader"),
        ({"ready": lambda: False}, "NotSynced", "not synced"),
        (
            {"is_leader": lambda: False,
             "leader_url": lambda: f"http://127.0.0.1:{_closed_port()}/gpupool"},
            "ForwardFailed",
            "forwarded to the gpupool extender leader",
        ),
    ],
)  # fmt: skip
def test_a_refused_bind_is_counted_by_its_reason(
    app: dict[str, Any], reason: str, words: str
) -> None:
    replies, series = asyncio.run(_calls([("bind", _pod("p1", "20Gi"))], **app))
    assert words in replies[0]["Error"]
    assert "reason" not in json.dumps(replies[0]).lower()  # the reason is ours, not the wire's
    assert _refused(series, reason, "bind") == 1
    bind_reasons = {
        k: v for k, v in series.items() if k.startswith("gpupool_extender_refusals_total") and
        "'bind'" in k
    }  # fmt: skip
    assert sum(bind_reasons.values()) == 1 and len(bind_reasons) > 10  # every reason shown
    assert series[f"gpupool_extender_binds_total{[('outcome', 'error')]}"] == 1


def test_the_picks_counted_until_their_binds_are_shown() -> None:
    """Two pods filtered, one node each that fits: both picks counted until their binds (none
    comes here: the extender has no API client)."""
    calls = [("filter", _pod("p1", "20Gi")), ("filter", _pod("p2", "30Gi"))]
    _, series = asyncio.run(_calls(calls))
    assert series["gpupool_extender_picks[]"] == 2
    assert series["gpupool_extender_picks_expired_total[]"] == 0


def test_a_sweep_tells_how_many_picks_it_let_go() -> None:
    now = [1_000.0]
    ext = Extender(_cache(), policy="binpack", clock=lambda: now[0])
    told: list[int] = []
    ext.set_pick_expiry_sink(told.append)
    body = {"Pod": _pod("p1", "20Gi"), "NodeNames": NAMES}
    ext.filter(ExtenderArgs.from_json(body))
    asyncio.run(ext._tick())
    assert told == [] and len(ext.cache.picks()) == 1  # not old yet
    now[0] += 16
    asyncio.run(ext._tick())
    assert told == [1] and not ext.cache.picks()
