"""A standby extender forwards /bind to the leader: real aiohttp apps (`make_app`) on loopback
ports, a leader whose Extender binds against an in-memory API server and a standby that knows the
leader's URL (from LeaderElector rounds against an in-memory Lease, or given outright), driven
with the extender/v1 JSON kube-scheduler sends."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, cast

import aiohttp
from aiohttp import web
from lightkube import AsyncClient
from support.lease_api import NAME, NS, Clock, FakeLeaseApi
from support.waiting import wait_until_async
from test_leader import BindApi, one_card_cache  # the bind API, a one-card cache

from gpupool.adapters.extender_http.server import FORWARDED_HEADER, Metrics, make_app
from gpupool.adapters.extender_http.service import Extender
from gpupool.adapters.kubernetes.leader import LeaderElector

NODE = "n"
BODY = {"PodName": "p", "PodNamespace": "t", "PodUID": "uid-p", "Node": NODE}


def _extender(api: BindApi) -> Extender:
    return Extender(one_card_cache(NODE), api, policy="binpack")


@asynccontextmanager
async def _serving(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


async def _free_url() -> str:
    """A loopback URL nothing listens on (the port was just bound and released)."""
    async with _serving(web.Application()) as url:
        pass
    return url


async def _post(url: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=json.dumps(body).encode(), headers=headers) as resp,
    ):
        return resp.status, json.loads(await resp.read())


def _forwards(metrics: Metrics, outcome: str) -> float:
    return metrics.bind_forwards.labels(outcome)._value.get()


def _standby(
    api: BindApi, leader_url: Callable[[], str | None], **kw: Any
) -> tuple[web.Application, Metrics]:
    metrics = Metrics()
    app = make_app(
        _extender(api), metrics=metrics, is_leader=lambda: False, leader_url=leader_url, **kw
    )
    return app, metrics


def test_a_standby_forwards_bind_to_the_leader_the_lease_names() -> None:
    async def main() -> None:
        leader_api, standby_api = BindApi(), BindApi()
        lease_api, clock = FakeLeaseApi(), Clock()
        leader_metrics = Metrics()
        # A URL is only known once its app serves: the electors start after both apps.
        electors: dict[str, LeaderElector] = {}
        leader_app = make_app(
            _extender(leader_api),
            metrics=leader_metrics,
            is_leader=lambda: electors["a"].is_leader(),
            leader_url=lambda: electors["a"].leader_url(),
        )
        standby_app, standby_metrics = _standby(standby_api, lambda: electors["b"].leader_url())
        async with _serving(leader_app) as a_url, _serving(standby_app) as b_url:
            for identity, url in (("a", a_url), ("b", b_url)):
                electors[identity] = LeaderElector(
                    cast(AsyncClient, lease_api),
                    NS,
                    NAME,
                    identity,
                    clock=clock,
                    advertise_url=url,
                )
            await electors["a"]._try()
            await electors["b"]._try()
            assert electors["a"].is_leader() and not electors["b"].is_leader()
            assert electors["b"].leader_url() == a_url

            status, reply = await _post(f"{b_url}/gpupool/bind", BODY)  # a urlPrefix path

            assert status == 200 and reply == {"Error": ""}, reply
            assert leader_api.writes[0] == "bind t/p n"  # the bind answers after the Binding
            await wait_until_async(
                lambda: leader_api.writes == ["bind t/p n", "create t/uid-p"], 10, "the lease"
            )
            assert standby_api.writes == []
            # The pod is decoded once, by the leader's one fresh read; the standby only checked
            # the body's fields and passed the leader's reply on.
            assert (leader_api.reads, standby_api.reads) == (1, 0)
            assert _forwards(standby_metrics, "ok") == 1
            assert _forwards(standby_metrics, "error") == 0
            assert leader_metrics.binds.labels("ok")._value.get() == 1
            assert _forwards(leader_metrics, "ok") == 0  # the leader bound it itself

            # The same pod again: the leader's own answer comes back as it is.
            status, again = await _post(f"{b_url}/bind", BODY)
            assert status == 200 and _forwards(standby_metrics, "ok") == 2
            assert again == {"Error": ""} or "uid-p" in again["Error"], again

    asyncio.run(main())


def test_a_forwarded_bind_is_never_forwarded_again() -> None:
    """Two replicas that each believe the other leads (a moment around a takeover): the bind
    goes one hop and is refused there, not bounced back and forth."""

    async def main() -> None:
        urls: dict[str, str] = {}
        a_api, b_api = BindApi(), BindApi()
        a_app, a_metrics = _standby(a_api, lambda: urls["b"])
        b_app, b_metrics = _standby(b_api, lambda: urls["a"])
        async with _serving(a_app) as urls["a"], _serving(b_app) as urls["b"]:
            status, reply = await _post(f"{urls['a']}/bind", BODY)
            assert status == 200
            assert "not the leader" in reply["Error"], reply
            assert "not forwarded again" in reply["Error"], reply  # b's answer, passed on
            assert _forwards(a_metrics, "ok") == 1
            assert _forwards(b_metrics, "ok") + _forwards(b_metrics, "error") == 0
            assert a_api.writes == b_api.writes == []

            # Sent with the mark, a replica that is not leader refuses it itself.
            status, reply = await _post(f"{urls['a']}/bind", BODY, {FORWARDED_HEADER: "1"})
            assert status == 200 and "not the leader" in reply["Error"], reply
            assert _forwards(a_metrics, "ok") == 1

    asyncio.run(main())


def test_a_standby_that_knows_no_leader_or_only_itself_refuses_as_before() -> None:
    own = "http://127.0.0.1:1"  # nothing listens there: a forward to it would fail, not refuse

    async def main() -> None:
        for known in (None, own):
            api = BindApi()
            app, metrics = _standby(api, lambda k=known: k, own_url=own)  # type: ignore[misc]
            async with _serving(app) as url:
                status, reply = await _post(f"{url}/bind", BODY)
            assert status == 200
            assert reply["Error"] == "this gpupool extender replica is not the leader", reply
            assert _forwards(metrics, "ok") + _forwards(metrics, "error") == 0
            assert api.writes == []

    asyncio.run(main())


def test_a_leader_that_cannot_be_reached_is_an_extender_error_naming_it() -> None:
    async def main() -> None:
        dead = await _free_url()
        app, metrics = _standby(BindApi(), lambda: dead)
        async with _serving(app) as url:
            status, reply = await _post(f"{url}/bind", BODY)
        assert status == 200
        error = reply["Error"]
        assert f"leader at {dead} failed" in error and "Connect" in error, error
        assert _forwards(metrics, "error") == 1 and _forwards(metrics, "ok") == 0

    asyncio.run(main())


def test_a_leader_that_answers_too_late_or_wrongly_is_an_extender_error() -> None:
    async def main() -> None:
        release = asyncio.Event()

        async def hang(request: web.Request) -> web.Response:
            await release.wait()
            return web.json_response({"Error": ""})

        async def fail(request: web.Request) -> web.Response:
            return web.Response(status=500, text="boom")

        async def not_json(request: web.Request) -> web.Response:
            return web.Response(text="<html>proxy</html>")

        cases = {"/slow/bind": hang, "/broken/bind": fail, "/odd/bind": not_json}
        stand_in = web.Application()  # not gpupool: a leader gone wrong
        for path, handler in cases.items():
            stand_in.router.add_post(path, handler)
        async with _serving(stand_in) as leader_url:
            app, metrics = _standby(BindApi(), lambda: leader_url, forward_timeout_s=0.3)
            async with _serving(app) as url:
                _, slow = await _post(f"{url}/slow/bind", BODY)
                _, broken = await _post(f"{url}/broken/bind", BODY)
                _, odd = await _post(f"{url}/odd/bind", BODY)
            release.set()
        assert f"leader at {leader_url} failed: no reply within 0.3 s" in slow["Error"], slow
        assert "failed: HTTP 500: boom" in broken["Error"], broken
        assert "not an extender result" in odd["Error"], odd
        assert _forwards(metrics, "error") == 3 and _forwards(metrics, "ok") == 0

    asyncio.run(main())


def test_a_standby_refuses_a_malformed_bind_itself() -> None:
    async def main() -> None:
        leader_api = BindApi()
        leader_app = make_app(_extender(leader_api))
        async with _serving(leader_app) as leader_url:
            app, metrics = _standby(BindApi(), lambda: leader_url)
            async with _serving(app) as url:
                status, reply = await _post(f"{url}/bind", {"PodName": "p"})
        assert status == 400 and "PodNamespace" in reply["error"], reply
        assert _forwards(metrics, "ok") + _forwards(metrics, "error") == 0
        assert leader_api.writes == []

    asyncio.run(main())
