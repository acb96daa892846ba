"""A minimal synchronous JSON client for the dev cluster's apiserver (client-certificate auth).

The dev cluster needs a handful of calls (readiness, nodes, namespaces) before any gpupool
component runs, so this stays on the standard library. It ignores proxy variables: the
apiserver is on loopback.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from gpupool.devcluster.errors import ApiError

# (apiVersion, kind) -> (API prefix, plural, namespaced): the kinds the dev cluster applies.
OBJECT_PATHS: dict[tuple[str, str], tuple[str, str, bool]] = {
    ("v1", "Namespace"): ("/api/v1", "namespaces", False),
    ("v1", "ServiceAccount"): ("/api/v1", "serviceaccounts", True),
    **{
        ("rbac.authorization.k8s.io/v1", kind): (
            "/apis/rbac.authorization.k8s.io/v1",
            kind.lower() + "s",
            not kind.startswith("Cluster"),
        )
        for kind in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
    },
    **{
        ("admissionregistration.k8s.io/v1", kind): (
            "/apis/admissionregistration.k8s.io/v1",
            kind.lower() + "s",
            False,
        )
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
    },
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingadmissionpolicies",
        False,
    ),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingadmissionpolicybindings",
        False,
    ),
}


def collection_path(obj: dict[str, Any]) -> str:
    """The URL path of the collection `obj` is created in."""
    key = (str(obj.get("apiVersion")), str(obj.get("kind")))
    if key not in OBJECT_PATHS:
        raise ValueError(f"the dev cluster does not apply {key[1]} ({key[0]}) objects")
    prefix, plural, namespaced = OBJECT_PATHS[key]
    if namespaced:
        return f"{prefix}/namespaces/{obj['metadata']['namespace']}/{plural}"
    return f"{prefix}/{plural}"


class KubeApi:
    def __init__(self, server: str, ca: Path, cert: Path, key: Path, *, timeout_s: float = 10.0):
        self.server = server.rstrip("/")
        self.timeout_s = timeout_s
        context = ssl.create_default_context(cafile=str(ca))
        context.load_cert_chain(str(cert), str(key))
        self._context = context
        self._opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
        )

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
    ) -> Any:
        """Send one request; return the decoded JSON (or text) body; raise ApiError on >= 400."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
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

    def connection(self) -> Connection:
        """A kept-alive connection for many requests in a row from one thread (`request` opens
        a new connection, with its TLS handshake, for each)."""
        return Connection(self.server, self._context, self.timeout_s)

    def create(self, path: str, body: dict[str, Any]) -> Any:
        return self.request("POST", path, body)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def patch(self, path: str, body: dict[str, Any]) -> Any:
        """A JSON merge patch."""
        return self.request("PATCH", path, body, content_type="application/merge-patch+json")

    def create_or_replace(self, obj: dict[str, Any]) -> Any:
        """Create `obj` (one of the kinds in OBJECT_PATHS); if it exists, replace it."""
        collection = collection_path(obj)
        try:
            return self.create(collection, obj)
        except ApiError as err:
            if err.status != 409:
                raise
        path = f"{collection}/{obj['metadata']['name']}"
        current = self.get(path)
        metadata = {**obj["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}
        return self.request("PUT", path, {**obj, "metadata": metadata})

    def find(self, path: str) -> Any:
        """The object at `path`, or None when there is none (404)."""
        try:
            return self.get(path)
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def exists(self, path: str) -> bool:
        return self.find(path) is not None


class Connection:
    """One HTTPS connection to the apiserver, kept alive across requests; one thread's."""

    def __init__(self, server: str, context: ssl.SSLContext, timeout_s: float) -> None:
        parts = urllib.parse.urlsplit(server)
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or 443
        self._context = context
        self._timeout_s = timeout_s
        self._conn: http.client.HTTPSConnection | None = None

    def _open(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            self._host, self._port, context=self._context, timeout=self._timeout_s
        )

    def create(self, path: str, body: dict[str, Any]) -> Any:
        """POST `body`; the decoded answer; ApiError on >= 400."""
        data = json.dumps(body).encode()
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        reused = self._conn is not None
        conn = self._conn or self._open()
        try:
            conn.request("POST", path, body=data, headers=headers)
            resp = conn.getresponse()
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
            conn.close()
            self._conn = None
            if not reused:
                raise
            # The server had closed the idle connection before this request reached it.
            conn = self._open()
            conn.request("POST", path, body=data, headers=headers)
            resp = conn.getresponse()
        raw = resp.read()
        self._conn = None if resp.will_close else conn
        text = raw.decode("utf-8", errors="replace")
        if resp.status >= 400:
            detail = text
            with contextlib.suppress(ValueError, AttributeError):
                detail = str(json.loads(text).get("message", text))
            raise ApiError("POST", path, resp.status, detail)
        try:
            return json.loads(text)
        except ValueError:
            return text

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
