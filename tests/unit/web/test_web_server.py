"""`gpupool web`'s HTTP side, served for real on loopback, over the fixed pool of the views'
tests (a test may change what the next refresh reads: `Pool.inputs`). The API server's reviews
are a small fake of the web view's own `Reviews` interface (the real ones are checked against the
dev cluster in tests/e2e/test_web_browser_e2e.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "views"))

from pool_fixture import NOW, lease, small_pool

from gpupool.adapters.web.access import Access, Question, Viewer
from gpupool.adapters.web.delta import apply
from gpupool.adapters.web.server import COOKIE, make_app
from gpupool.adapters.web.source import StateSource
from gpupool.state.views.status import ViewInputs

TOKENS = {"admin-token": "admin", "a-token": "alice"}  # alice: team-a's developer


class FakeReviews:
    def __init__(self) -> None:
        self.asked: list[Question] = []

    async def token(self, token: str) -> Viewer | None:
        user = TOKENS.get(token)
        return None if user is None else Viewer(user, groups=(f"{user}-group",))

    async def allowed(self, viewer: Viewer, question: Question) -> bool:
        self.asked.append(question)
        if viewer.user == "admin":
            return True
        return "team-a" in (question.namespace, question.name)


Client = Callable[..., Coroutine[Any, Any, tuple[int, Any, aiohttp.ClientResponse]]]


class Pool:
    """What the source reads: the views' small pool unless a test changed it."""

    inputs = small_pool()


async def _serve(dev_insecure: bool = False) -> AsyncIterator[tuple[str, StateSource]]:
    Pool.inputs = small_pool()

    async def read() -> ViewInputs:
        return Pool.inputs

    source = StateSource.reading(read, lambda: NOW)
    await source.refresh()
    access = Access(FakeReviews(), lambda: 0.0, dev_insecure=dev_insecure)
    runner = web.AppRunner(make_app(source, access, secure_cookie=False))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", source
    finally:
        await runner.cleanup()


def _run(
    test: Callable[[str, StateSource, aiohttp.ClientSession], Coroutine[Any, Any, None]],
    *,
    dev: bool = False,
) -> None:
    async def main() -> None:
        async for url, source in _serve(dev):
            async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
                await test(url, source, session)

    asyncio.run(main())


async def _get(
    session: aiohttp.ClientSession, url: str, token: str | None = None
) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with session.get(url, headers=headers) as resp:
        return resp.status, json.loads(await resp.text())


def test_no_token_and_a_bad_token_are_refused_with_what_to_do() -> None:
    async def test(url: str, _: StateSource, session: aiohttp.ClientSession) -> None:
        code, doc = await _get(session, f"{url}/api/v1/state")
        assert code == 401 and "log in with a Kubernetes bearer token" in doc["message"]
        code, doc = await _get(session, f"{url}/api/v1/state", "expired")
        assert code == 401 and "has expired, been revoked" in doc["message"]
        assert doc["kind"] == "Error" and "Traceback" not in json.dumps(doc)

    _run(test)


def test_the_operator_sees_the_terminal_views_json() -> None:
    async def test(url: str, _: StateSource, session: aiohttp.ClientSession) -> None:
        code, doc = await _get(session, f"{url}/api/v1/state", "admin-token")
        assert code == 200 and doc["operator"] is True
        assert doc["status"]["kind"] == "PoolStatus" and doc["queue"]["kind"] == "Queue"
        assert {t["name"] for t in doc["status"]["tenants"]} == {"team-a", "team-b"}
        code, doc = await _get(session, f"{url}/api/v1/status?node=nope", "admin-token")
        assert code == 404 and "no GPU node named 'nope'" in doc["message"]
        code, doc = await _get(session, f"{url}/api/v1/status?tenant=nope", "admin-token")
        assert code == 404 and "no tenant named 'nope'" in doc["message"]

    _run(test)


def test_a_tenant_sees_its_own_and_is_refused_the_rest() -> None:
    async def test(url: str, _: StateSource, session: aiohttp.ClientSession) -> None:
        code, doc = await _get(session, f"{url}/api/v1/state", "a-token")
        assert code == 200 and doc["operator"] is False
        assert [t["name"] for t in doc["status"]["tenants"]] == ["team-a"]
        pods = [s["pod"] for n in doc["status"]["nodes"] for c in n["cards"] for s in c["slices"]]
        assert pods and all(p.startswith("team-a/") or p == "" for p in pods)
        code, doc = await _get(session, f"{url}/api/v1/status?tenant=team-b", "a-token")
        assert code == 403 and "alice may not read tenant 'team-b'" in doc["message"]
        code, doc = await _get(session, f"{url}/api/v1/leases?namespace=team-b", "a-token")
        assert code == 403 and "may not read namespace 'team-b'" in doc["message"]

    _run(test)


def test_the_login_keeps_the_token_in_an_http_only_cookie() -> None:
    async def test(url: str, _: StateSource, session: aiohttp.ClientSession) -> None:
        async with session.post(f"{url}/api/v1/login", json={"token": "nope"}) as resp:
            assert resp.status == 401
        async with session.post(f"{url}/api/v1/login", data=b"not json") as resp:
            assert resp.status == 400 and "send JSON" in (await resp.json())["message"]
        async with session.post(f"{url}/api/v1/login", json={"token": "a-token"}) as resp:
            assert resp.status == 200
            cookie = resp.cookies[COOKIE]
            assert cookie["httponly"] and cookie["samesite"] == "Strict"
        code, doc = await _get(session, f"{url}/api/v1/whoami")  # the cookie, no header
        assert code == 200 and doc["user"] == "alice" and doc["tenants"] == ["team-a"]

    _run(test)


def test_dev_insecure_lets_a_request_without_a_token_see_everything() -> None:
    async def test(url: str, _: StateSource, session: aiohttp.ClientSession) -> None:
        code, doc = await _get(session, f"{url}/api/v1/state")
        assert code == 200 and doc["user"] == "system:anonymous" and doc["operator"]
        code, doc = await _get(session, f"{url}/api/v1/state", "a-token")  # a token narrows it
        assert code == 200 and not doc["operator"]

    _run(test, dev=True)


Event = tuple[str, int, Any]  # event, id, data


async def _events(resp: aiohttp.ClientResponse) -> AsyncIterator[Event]:
    fields: dict[str, str] = {}
    async for raw in resp.content:
        line = raw.decode().rstrip("\n")
        if line.startswith(":"):
            continue
        if line:
            name, _, value = line.partition(": ")
            fields[name] = value
            continue
        if not fields:
            continue  # the end of a comment (keepalive, unchanged)
        yield fields["event"], int(fields["id"]), json.loads(fields["data"])
        fields = {}


def _place(pod: str, card: int) -> None:
    """A pod of team-a placed on gpu-node-c (the next refresh reads it)."""
    placed = lease("team-a", pod, "gpu-node-c", [(card, 0, 8)], age_s=0.0)
    Pool.inputs = dataclasses.replace(Pool.inputs, leases=[*Pool.inputs.leases, placed])


def test_a_stream_sends_the_state_then_what_changed_in_it() -> None:
    async def test(url: str, source: StateSource, session: aiohttp.ClientSession) -> None:
        headers = {"Authorization": "Bearer a-token"}
        seen: list[Event] = []
        async with session.get(f"{url}/api/v1/events", headers=headers) as resp:
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            async for event in _events(resp):
                seen.append(event)
                if len(seen) == 1:
                    await source.refresh()  # nothing alice sees changed: nothing is sent
                    _place("late-1", 2)
                    await source.refresh()
                elif len(seen) == 2:
                    _place("late-2", 3)
                    await source.refresh()
                else:
                    break
            _, now = await _get(session, f"{url}/api/v1/state", "a-token")
        (first, v1, doc), (second, v3, patch), (third, v4, patch2) = seen
        assert (first, second, third) == ("state", "patch", "patch")
        assert doc["kind"] == "WebState" and doc["user"] == "alice"
        # the unchanged snapshot (v1 + 1) was skipped: the patch's base is what the page holds
        assert (patch["base"], patch["version"], v3) == (v1, v1 + 2, v1 + 2)
        assert (patch2["base"], patch2["version"], v4) == (v3, v3 + 1, v3 + 1)
        pods = {x["pod"] for x in now["leases"]["live"]}
        assert {"team-a/late-1", "team-a/late-2"} <= pods
        assert apply(apply(doc, patch["ops"]), patch2["ops"]) == now  # what a GET says now
        assert len(json.dumps(patch)) < len(json.dumps(now)) / 2

    _run(test)


def test_a_stream_that_is_refused_later_says_why_and_ends() -> None:
    async def test(url: str, source: StateSource, session: aiohttp.ClientSession) -> None:
        headers = {"Authorization": "Bearer a-token"}
        seen: list[Event] = []
        async with session.get(f"{url}/api/v1/events?node=gpu-node-a", headers=headers) as resp:
            async for event in _events(resp):
                seen.append(event)
                if len(seen) == 1:  # alice's last slice on gpu-node-a goes: she may not see it
                    Pool.inputs = dataclasses.replace(
                        Pool.inputs,
                        leases=[x for x in Pool.inputs.leases if x.node != "gpu-node-a"],
                    )
                    await source.refresh()
        assert [e for e, _, _ in seen] == ["state", "failure"]
        assert seen[1][2]["code"] == 403 and "gpu-node-a" in seen[1][2]["message"]

    _run(test)


def test_static_files_and_unknown_paths() -> None:
    async def test(url: str, _: StateSource, session: aiohttp.ClientSession) -> None:
        async with session.get(f"{url}/") as resp:
            assert resp.status == 200 and "/static/app.js" in await resp.text()
        for name in ("app.js", "style.css"):
            async with session.get(f"{url}/static/{name}") as resp:
                body = await resp.text()
                assert resp.status == 200 and "http://" not in body and "https://" not in body
        code, doc = await _get(session, f"{url}/nothing/here")
        assert code == 404 and "the view is at /" in doc["message"]

    _run(test)


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(key, raising=False)
