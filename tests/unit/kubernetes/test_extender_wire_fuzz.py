"""The extender's wire under random input: whatever JSON (or not JSON) reaches /filter,
/prioritize and /bind of the real HTTP server (`make_app` on a loopback port, aiohttp as in
production), the answer is never a 500 and never a Python message (an exception's type, a
traceback, "object has no attribute"): kube-scheduler, and whoever reads its events, gets our
own sentences.

The server runs in a thread with its own event loop for the whole module; hypothesis sends each
example over HTTP with the standard library's client.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_leader import BindApi, one_card_cache

from gpupool.adapters.extender_http.server import make_app
from gpupool.adapters.extender_http.service import Extender

# What a Python message looks like when it leaks into a reply.
PYTHON = re.compile(
    r"Traceback|\b\w+(Error|Exception)\b:|object has no attribute|NoneType|not subscriptable|"
    r"unhashable type|object is not|takes \d+ positional|unexpected keyword|<class '|"
    r"invalid literal for int\(\)|could not convert string|\bgot (None|True|False)\b"
)
VERBS = ("filter", "prioritize", "bind")
KEYS = (
    "Pod", "Nodes", "NodeNames", "PodName", "PodNamespace", "PodUID", "Node", "metadata",
    "spec", "name", "namespace", "uid", "items", "containers", "resources", "limits",
    "gpupool.io/gpu-memory", "gpupool.io/gpu", "gpupool.io/gpu-compute", "annotations", "labels",
)  # fmt: skip

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(["n", "t", "uid-p", "8Gi", "-1", "1e400", "", "A100-80GB", "x" * 300])
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), inner, max_size=5)
    ),
    max_leaves=25,
)
bodies = st.one_of(
    values.map(lambda v: json.dumps(v).encode()),
    st.dictionaries(st.sampled_from(KEYS), values, max_size=6).map(
        lambda v: json.dumps(v).encode()
    ),
    st.binary(max_size=64),
)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    loop = asyncio.new_event_loop()
    started = threading.Event()
    state: dict[str, Any] = {}

    async def serve() -> None:
        app = make_app(Extender(one_card_cache("n"), BindApi(), policy="binpack"))
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        state["url"], state["runner"] = f"http://{host}:{port}", runner
        started.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(serve(), loop).result(timeout=30)
    assert started.wait(30)
    try:
        yield str(state["url"])
    finally:
        asyncio.run_coroutine_threadsafe(state["runner"].cleanup(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)


def _post(url: str, body: bytes) -> tuple[int, str]:
    request = urllib.request.Request(url, data=body, method="POST")
    request.add_header("Content-Type", "application/json")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=30) as resp:
            return int(resp.status), resp.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as err:
        return int(err.code), err.read().decode("utf-8", errors="replace")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(verb=st.sampled_from(VERBS), body=bodies, prefix=st.sampled_from(["", "/gpupool"]))
def test_no_body_gets_a_500_or_a_python_message(
    server: str, verb: str, body: bytes, prefix: str
) -> None:
    status, text = _post(f"{server}{prefix}/{verb}", body)
    assert status in (200, 400), (status, text)
    json.loads(text)  # always JSON
    assert not PYTHON.search(text), text
