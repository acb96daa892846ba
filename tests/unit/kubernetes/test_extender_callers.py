"""The extender answers filter, prioritize and bind only for kube-scheduler's client certificate:
the real aiohttp app over TLS on a loopback port (`make_app(callers=...)`, the server context
`gpupool extender --client-ca` builds), with certificates from a CA made for the test."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import ssl
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from test_leader import BindApi, one_card_cache

from gpupool.adapters.extender_http.server import make_app
from gpupool.adapters.extender_http.service import Extender
from gpupool.adapters.tls import Authority, name, server_context, write_cert, write_key

BODY = {"PodName": "p", "PodNamespace": "t", "PodUID": "uid-p", "Node": "n"}


def _pki(folder: Path) -> dict[str, Path]:
    ca = Authority("test-ca", dt.datetime.now(dt.UTC))
    files: dict[str, Path] = {"ca": folder / "ca.crt"}
    write_cert(files["ca"], ca.cert)
    for stem, cn, server in (
        ("server", "gpupool-extender", True),
        ("scheduler", "system:kube-scheduler", False),
        ("other", "system:serviceaccount:t:someone", False),
    ):
        cert, key = ca.issue(name(cn), server=server, ips=("127.0.0.1",) if server else ())
        files[stem], files[f"{stem}-key"] = folder / f"{stem}.crt", folder / f"{stem}.key"
        write_cert(files[stem], cert)
        write_key(files[f"{stem}-key"], key)
    return files


async def _calls(files: dict[str, Path]) -> dict[str, tuple[int, Any]]:
    app = make_app(
        Extender(one_card_cache("n"), BindApi(), policy="binpack"),
        callers=frozenset({"system:kube-scheduler"}),
    )
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    context = server_context(files["server"], files["server-key"], files["ca"])
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = runner.addresses[0][1]
    out: dict[str, tuple[int, Any]] = {}
    try:
        for who in ("none", "other", "scheduler"):
            client = ssl.create_default_context(cafile=str(files["ca"]))
            if who != "none":
                client.load_cert_chain(str(files[who]), str(files[f"{who}-key"]))
            async with (
                aiohttp.ClientSession() as session,
                session.post(
                    f"https://127.0.0.1:{port}/gpupool/bind", json=BODY, ssl=client
                ) as resp,
            ):
                out[who] = (resp.status, json.loads(await resp.read()))
            if who == "none":
                async with (
                    aiohttp.ClientSession() as session,
                    session.get(f"https://127.0.0.1:{port}/healthz", ssl=client) as resp,
                ):
                    out["healthz"] = (resp.status, await resp.text())
    finally:
        await runner.cleanup()
    return out


def test_only_kube_schedulers_certificate_may_call_and_health_stays_open(tmp_path: Path) -> None:
    got = asyncio.run(_calls(_pki(tmp_path)))
    status, reply = got["none"]
    assert status == 403
    assert reply["error"] == (
        "gpupool extender: filter, prioritize and bind answer only system:kube-scheduler, with a "
        "client certificate the extender's --client-ca signed; this call came with no verified "
        "client certificate"
    )
    status, reply = got["other"]
    assert status == 403 and "'system:serviceaccount:t:someone'" in reply["error"]
    assert got["scheduler"] == (200, {"Error": ""})  # bound (the in-memory API)
    assert got["healthz"] == (200, "ok\n")
