"""The webhook's reads (`KubeLookups`, lightkube over a real socket) survive dropped
connections and the API server's "later" answers (429, 504), not its refusals; and a GpuQuota
the webhook cannot check against the others is refused with a 503
that says to retry (not the 500 of a bug)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping

from aiohttp.test_utils import TestClient, TestServer
from support.loopback_client import loopback_client

from gpupool.adapters.webhook.lookups import KubeLookups, why
from gpupool.adapters.webhook.server import build_app
from gpupool.quota.spec import TenantQuota

QUOTA = {"apiVersion": "gpupool.io/v1alpha1", "kind": "GpuQuota",
         "metadata": {"name": "team-b"}, "spec": {"nominal": "48Gi"}}  # fmt: skip


async def _api_dropping_first(drops: int) -> tuple[asyncio.Server, list[str]]:
    """A plain-HTTP stand-in for the API server's list of GpuQuotas: the first `drops`
    connections are closed once the request is read, as a server closing a kept-alive
    connection does; later ones are answered."""
    seen: list[str] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        seen.append(head.split(" ")[1])
        if len(seen) <= drops:
            writer.close()
            return
        body = json.dumps(
            {
                "kind": "GpuQuotaList",
                "apiVersion": "gpupool.io/v1alpha1",
                "metadata": {"resourceVersion": "7"},
                "items": [QUOTA],
            }
        ).encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
        )
        await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0), seen


def _lookups(port: int) -> KubeLookups:
    return KubeLookups(loopback_client(port))


def test_a_list_is_retried_once_after_a_dropped_connection() -> None:
    async def run() -> tuple[list[TenantQuota], list[str]]:
        server, seen = await _api_dropping_first(1)
        lookups = _lookups(server.sockets[0].getsockname()[1])
        try:
            return await lookups.quotas(), seen
        finally:
            await lookups.client.close()
            server.close()

    quotas, seen = asyncio.run(run())
    assert [q.name for q in quotas] == ["team-b"]
    assert seen == ["/apis/gpupool.io/v1alpha1/gpuquotas"] * 2


def test_three_dropped_connections_are_not_hidden() -> None:
    async def run() -> str:
        server, _ = await _api_dropping_first(3)
        lookups = _lookups(server.sockets[0].getsockname()[1])
        try:
            await lookups.quotas()
        except Exception as err:  # what the handler turns into its 503
            return type(err).__name__
        finally:
            await lookups.client.close()
            server.close()
        return "no error"

    assert asyncio.run(run()) == "RemoteProtocolError"


class Unreachable:
    async def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        raise ConnectionError("[Errno 111] Connection refused")

    async def quotas(self) -> list[TenantQuota]:
        raise ConnectionError("[Errno 111] Connection refused")

    async def cards(self) -> tuple[tuple[str, int], ...]:
        return ()

    async def gang_members(self, namespace: str, gang: str) -> list[Mapping[str, object]]:
        return []

    async def lease_ttl(self, tenant: str) -> float | None:
        return None


def test_a_quota_that_cannot_be_checked_against_the_others_is_refused_with_a_retry() -> None:
    async def run() -> dict[str, object]:
        async with TestClient(TestServer(build_app(Unreachable(), lambda: 0.0))) as client:
            review = {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {"uid": "u1", "operation": "CREATE", "object": QUOTA},
            }
            resp = await client.post("/validate/gpuquotas", json=review)
            assert resp.status == 200
            answer: dict[str, object] = (await resp.json())["response"]
            return answer

    answer = asyncio.run(run())
    assert answer["allowed"] is False
    status = answer["status"]
    assert isinstance(status, dict) and status["code"] == 503
    assert "retry" in status["message"] and "bug" not in status["message"]


async def _api_answering_first(status: bytes, times: int) -> tuple[asyncio.Server, list[str]]:
    """The list of GpuQuotas answered `times` times with `status` (and a Retry-After of 0) as the
    API server answers while its watch cache initialises (429) or catches up with etcd (504)."""
    seen: list[str] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        seen.append(head.split(" ")[1])
        if len(seen) <= times:
            code = int(status.split(b" ")[0])
            message = f"Timeout: Too large resource version ({code})"
            body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                               "message": message, "code": code}).encode()  # fmt: skip
            head_out = b"HTTP/1.1 " + status + b"\r\nRetry-After: 0\r\n"
        else:
            body = json.dumps({"kind": "GpuQuotaList", "apiVersion": "gpupool.io/v1alpha1",
                               "metadata": {"resourceVersion": "7"},
                               "items": [QUOTA]}).encode()  # fmt: skip
            head_out = b"HTTP/1.1 200 OK\r\n"
        writer.write(
            head_out + b"Content-Type: application/json\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
        )
        await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0), seen


def _quotas_after(status: bytes, times: int) -> tuple[list[str] | str, int]:
    async def run() -> tuple[list[str] | str, int]:
        server, seen = await _api_answering_first(status, times)
        lookups = _lookups(server.sockets[0].getsockname()[1])
        try:
            return [q.name for q in await lookups.quotas()], len(seen)
        except Exception as err:
            return why(err), len(seen)
        finally:
            await lookups.client.close()
            server.close()

    return asyncio.run(run())


def test_a_list_the_api_server_answers_later_is_retried_after_its_retry_after() -> None:
    assert _quotas_after(b"504 Gateway Timeout", 2) == (["team-b"], 3)
    assert _quotas_after(b"429 Too Many Requests", 1) == (["team-b"], 2)


def test_a_refusal_is_not_retried_and_a_lasting_one_is_said_with_the_servers_answer() -> None:
    assert _quotas_after(b"403 Forbidden", 1) == (
        "the API server answered 403: Timeout: Too large resource version (403)", 1)  # fmt: skip
    answered, requests = _quotas_after(b"504 Gateway Timeout", 5)
    assert requests == 3 and answered.startswith("the API server answered 504"), answered
