"""POST to the API server over aiohttp, for the extender's two writes per bind.

lightkube sends through httpx, whose connection pool and request building cost the extender's one
event loop more per request than the request itself at a few hundred binds a second (profiled:
a third of the extender's CPU in the throughput benchmark went to httpx). The bind path posts two
small JSON bodies per pod (the GpuLease, the Binding) and reads one reply; this client does only
that, with the kubeconfig's TLS settings and credentials (client certificate, bearer token or
token file) read by lightkube's own kubeconfig code. Everything else keeps using lightkube.
"""

from __future__ import annotations

import ssl
import time
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
from lightkube import KubeConfig
from lightkube.config.client_adapter import verify_cluster
from lightkube.config.kubeconfig import SingleConfig

# Service account tokens are rotated by the kubelet in place; re-read the file this often.
TOKEN_REREAD_S = 60.0


class ApiStatusError(Exception):
    """The API server answered a write with an error status (`code`, the Status message)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"API server answered {code}: {message}")
        self.code = code
        self.message = message


class UnsupportedCredentials(Exception):
    """The kubeconfig's user authenticates in a way this client does not do (exec, basic)."""


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
    def from_kubeconfig(cls, kubeconfig: Path | None, *, timeout_s: float = 10.0) -> FastPoster:
        """From a kubeconfig file, or the in-cluster service account when None."""
        config = KubeConfig.from_file(str(kubeconfig)) if kubeconfig else KubeConfig.from_env()
        single = config.get()
        if single is None:
            raise UnsupportedCredentials("the kubeconfig names no current context")
        return cls.from_config(single, timeout_s=timeout_s)

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
        """POST `body` (JSON-encodable) to `path`; the reply's bytes, or ApiStatusError."""
        data = msgspec.json.encode(body)
        async with self._client().post(
            self.server + path, data=data, headers=self._headers()
        ) as response:
            reply = await response.read()
            if response.status >= 400:
                raise ApiStatusError(response.status, _status_message(reply))
            return reply

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def _status_message(reply: bytes) -> str:
    try:
        status = msgspec.json.decode(reply)
    except msgspec.DecodeError:
        return reply[:300].decode(errors="replace")
    if isinstance(status, dict):
        return str(status.get("message") or status.get("reason") or "")
    return str(status)[:300]
