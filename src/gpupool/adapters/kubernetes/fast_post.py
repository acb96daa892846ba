"""POST to the API server over aiohttp, for the extender's two writes per bind.

lightkube sends through httpx, whose connection pool and request building cost the extender's one
event loop more per request than the request itself at a few hundred binds a second (profiled:
a third of the extender's CPU in the throughput benchmark went to httpx). The bind path posts two
small JSON bodies per pod (the GpuLease, the Binding) and reads one reply; this client does only
that, with the kubeconfig's TLS settings and credentials (client certificate, bearer token or
token file) read by lightkube's own kubeconfig code. Everything else keeps using lightkube.

`bind_poster` picks the writer from the config `kubeclient.kube_config` resolved: FastPoster,
or, for credentials it does not do (exec plugins, basic auth), `LightkubePoster` over the
lightkube client's own connection. Both answer an error status with the same typed
`ApiServerError` (errors.py), so the bind path has one write path whichever writer it got.
"""

from __future__ import annotations

import logging
import ssl
import time
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import msgspec
from lightkube import AsyncClient
from lightkube.config.client_adapter import verify_cluster
from lightkube.config.kubeconfig import SingleConfig

from gpupool.adapters.kubernetes.errors import KubeconfigError, api_error

log = logging.getLogger(__name__)

# Service account tokens are rotated by the kubelet in place; re-read the file this often.
TOKEN_REREAD_S = 60.0


class UnsupportedCredentials(KubeconfigError):
    """The kubeconfig's user authenticates in a way this client does not do (exec, basic)."""


class Poster(Protocol):
    """JSON POSTs to the API server: the reply's bytes, or a typed `ApiServerError`."""

    async def post(self, path: str, body: Any) -> bytes: ...

    async def close(self) -> None: ...


class FastPoster:
    """JSON POSTs to one API server with one kubeconfig user's credentials."""

    def __init__(
        self,
        server: str,
        ssl_context: ssl.SSLContext | None,
        *,
        token: str | None = None,
        token_file: Path | None = None,
        timeout_s: float = 10.0,
        max_connections: int = 64,
    ) -> None:
        self.server = server.rstrip("/")
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else False
        self._token = token
        self._token_file = token_file
        self._token_read_at = float("-inf")
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def from_config(cls, single: SingleConfig, *, timeout_s: float = 10.0) -> FastPoster:
        user = single.user
        if user is not None and (user.exec or user.auth_provider or user.username):
            raise UnsupportedCredentials(
                "exec, auth-provider and basic credentials are not supported by the fast path"
            )
        server = single.cluster.server
        ctx: ssl.SSLContext | None = None
        if server.startswith("https:"):
            ctx = verify_cluster(single.cluster, user, single.abs_file, trust_env=False)  # type: ignore[arg-type]
        token_file = single.abs_file(user.token_file) if user and user.token_file else None
        return cls(
            server,
            ctx,
            token=user.token if user else None,
            token_file=Path(token_file) if token_file else None,
            timeout_s=timeout_s,
        )

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._token_file is not None:
            now = time.monotonic()
            if now - self._token_read_at > TOKEN_REREAD_S:
                self._token = self._token_file.read_text().strip()
                self._token_read_at = now
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        return headers

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._max_connections, ssl=self._ssl),
                timeout=self._timeout,
                trust_env=False,
            )
        return self._session

    async def post(self, path: str, body: Any) -> bytes:
        """POST `body` (JSON-encodable) to `path`; the reply's bytes, or ApiServerError."""
        data = msgspec.json.encode(body)
        async with self._client().post(
            self.server + path, data=data, headers=self._headers()
        ) as response:
            reply = await response.read()
            if response.status >= 400:
                raise api_error(response.status, _status_message(reply))
            return reply

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


class LightkubePoster:
    """JSON POSTs over a lightkube client's own connection (its httpx client, with whatever
    credentials lightkube handles): the writer when FastPoster cannot authenticate."""

    def __init__(self, client: AsyncClient) -> None:
        self._http: Any = client._client._client  # lightkube's httpx AsyncClient (base_url, auth)

    async def post(self, path: str, body: Any) -> bytes:
        response = await self._http.post(
            path,
            content=msgspec.json.encode(body),
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        reply: bytes = response.content
        if response.status_code >= 400:
            raise api_error(response.status_code, _status_message(reply))
        return reply

    async def close(self) -> None:
        """The connection is the lightkube client's: closed with it."""


def bind_poster(config: SingleConfig, client: AsyncClient) -> Poster:
    """The bind path's writer for `config` (the one `client` was built from)."""
    try:
        return FastPoster.from_config(config)
    except UnsupportedCredentials as err:
        log.info("bind writes go through lightkube's connection: %s", err)
        return LightkubePoster(client)


def _status_message(reply: bytes) -> str:
    try:
        status = msgspec.json.decode(reply)
    except msgspec.DecodeError:
        return reply[:300].decode(errors="replace")
    if isinstance(status, dict):
        return str(status.get("message") or status.get("reason") or "")
    return str(status)[:300]
