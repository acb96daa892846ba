"""The extender's HTTP server as first written, kept here (not in src/) for extender_bench.py's
`before` mode: the standard library's JSON both ways, and prioritize's reply built as one dict
per host and encoded. The decisions are the extender's own (`Extender.filter`, `prioritize`), so
the mode measures the old HTTP and codec path. (The memo of node rows, which `before` also
switched off once, is no longer a switch: it is always on.)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from aiohttp import web

from gpupool.adapters.extender_http.service import Extender
from gpupool.adapters.extender_http.wire import ExtenderArgs


@dataclass(frozen=True, slots=True)
class JsonCodec:
    """How bodies are decoded and encoded (bytes in, bytes out): the bench's client uses both."""

    name: str
    decode: Callable[[bytes], Any]
    encode: Callable[[Any], bytes]


def _stdlib_encode(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


STDLIB = JsonCodec("json", json.loads, _stdlib_encode)
MSGSPEC = JsonCodec("msgspec", msgspec.json.decode, msgspec.json.encode)


def make_before_app(extender: Extender) -> web.Application:
    """POST /filter and /prioritize as the first server answered them."""

    def reply(data: Any) -> web.Response:
        return web.Response(body=_stdlib_encode(data), content_type="application/json")

    async def filter_h(request: web.Request) -> web.Response:
        args = ExtenderArgs.from_json(json.loads(await request.read()))
        return reply(extender.filter(args).to_json())

    async def prioritize_h(request: web.Request) -> web.Response:
        args = ExtenderArgs.from_json(json.loads(await request.read()))
        return reply([h.to_json() for h in extender.prioritize(args)])

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/filter", filter_h)
    app.router.add_post("/prioritize", prioritize_h)
    return app
