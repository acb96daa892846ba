"""A minimal synchronous JSON client for the dev cluster's apiserver (client-certificate auth).

The dev cluster needs a handful of calls (readiness, nodes, namespaces) before any gpupool
component runs, so this stays on the standard library. It ignores proxy variables: the
apiserver is on loopback.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from gpupool.devcluster.errors import ApiError


class KubeApi:
    def __init__(self, server: str, ca: Path, cert: Path, key: Path, *, timeout_s: float = 10.0):
        self.server = server.rstrip("/")
        self.timeout_s = timeout_s
        context = ssl.create_default_context(cafile=str(ca))
        context.load_cert_chain(str(cert), str(key))
        self._opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
        )

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """Send one request; return the decoded JSON (or text) body; raise ApiError on >= 400."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with self._opener.open(req, timeout=self.timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as err:
            detail = err.read().decode("utf-8", errors="replace")
            with contextlib.suppress(ValueError, AttributeError):
                detail = str(json.loads(detail).get("message", detail))
            raise ApiError(method, path, err.code, detail) from None
        text = raw.decode("utf-8", errors="replace")
        try:
            return json.loads(text)
        except ValueError:
            return text

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def create(self, path: str, body: dict[str, Any]) -> Any:
        return self.request("POST", path, body)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def exists(self, path: str) -> bool:
        try:
            self.get(path)
        except ApiError as err:
            if err.status == 404:
                return False
            raise
        return True
