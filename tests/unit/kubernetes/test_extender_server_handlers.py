"""The extender server's module-level handlers (`extender_http.server`), each over a
`ServerState`: filter and prioritize before the cache is synced, bind on a replica that is not
the leader (a forwarded bind is not forwarded again), a forward that gets no extender reply;
and `make_app` wires them over one state."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import aiohttp
from support.bind_api import BindApi, one_card_cache

from gpupool.adapters.extender_http.server import (
    STATE,
    ForwardFailed,
    Metrics,
    ServerState,
    forward,
    make_app,
    run_bind,
    run_filter,
    run_forwarded_bind,
    run_prioritize,
)
from gpupool.adapters.extender_http.service import Extender

POD = {"metadata": {"name": "p", "namespace": "t", "uid": "uid-p"}, "spec": {"containers": []}}
BIND = {"PodName": "p", "PodNamespace": "t", "PodUID": "uid-p", "Node": "n"}


def state(*, ready: bool = True, leader: bool = True, timeout_s: float = 1.0) -> ServerState:
    return ServerState(
        extender=Extender(one_card_cache("n"), BindApi(), policy="binpack"),
        metrics=Metrics(),
        ready=lambda: ready,
        is_leader=lambda: leader,
        leader_url=lambda: None,
        own_url=None,
        forward_timeout_s=timeout_s,
        callers=None,
        forward_ssl=None,
    )


def sample(s: ServerState, name: str, **labels: str) -> float | None:
    return s.metrics.registry.get_sample_value(name, labels)


def test_filter_and_prioritize_wait_for_the_cache() -> None:
    s = state(ready=False)
    body = {"Pod": POD, "NodeNames": ["n", "m"]}
    filtered = asyncio.run(run_filter(s, body))
    assert filtered["Error"] == "gpupool extender cache is not synced yet"
    scores = asyncio.run(run_prioritize(s, body))
    assert scores == [{"Host": "n", "Score": 0}, {"Host": "m", "Score": 0}]


def test_a_replica_that_is_not_leader_refuses_to_bind_and_says_a_forward_is_final() -> None:
    s = state(leader=False)
    local = asyncio.run(run_bind(s, BIND))
    assert local["Error"] == "this gpupool extender replica is not the leader"
    forwarded = asyncio.run(run_forwarded_bind(s, BIND))
    assert forwarded["Error"].endswith("(a bind forwarded to it is not forwarded again)")
    assert sample(s, "gpupool_extender_binds_total", outcome="error") == 2


def test_a_leader_not_synced_refuses_to_bind() -> None:
    s = state(ready=False)
    assert asyncio.run(run_bind(s, BIND))["Error"] == "gpupool extender cache is not synced yet"


def test_a_forward_nobody_answers_says_why() -> None:
    with socket.socket() as sock:  # a port just freed: nothing listens, connecting is refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    async def go() -> Any:
        async with aiohttp.ClientSession() as session:
            return await forward(state(), session, f"http://127.0.0.1:{port}", "/bind", b"{}")

    failed = asyncio.run(go())
    assert isinstance(failed, ForwardFailed) and "ClientConnectorError" in failed.reason


def test_make_app_keeps_one_state_for_its_handlers() -> None:
    metrics = Metrics()
    app = make_app(
        Extender(one_card_cache("n"), BindApi(), policy="binpack"),
        metrics=metrics,
        own_url="https://me:9443",
        forward_timeout_s=2.5,
    )
    s = app[STATE]
    assert s.metrics is metrics and s.own_url == "https://me:9443"
    assert s.forward_timeout_s == 2.5 and s.callers is None
