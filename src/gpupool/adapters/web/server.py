"""The web view's HTTP side: the page (plain HTML, CSS and JS shipped in the package, no CDN),
its JSON API and the server-sent events that keep it live.

Every answer is the terminal views' JSON (`adapters.views_json`, `views.gpupool.io/v1`) of the
one `StatusView` the `StateSource` holds, cut to what the caller may see (`Scope`, by
SubjectAccessReview). Routes:

    GET  /                      the page (pool map, tenant pages, node pages: #/tenant/T, #/node/N)
    GET  /api/v1/state          {status, queue, leases} for the page (?tenant=T, ?node=N,
                                ?namespace=NS)
    GET  /api/v1/status|queue|leases   the documents `gpupool status|queue|leases -o json` print
    GET  /api/v1/events         the same as /api/v1/state, then what changed in it (SSE: `state`
                                first, then `patch` events; `_stream`)
    GET  /api/v1/whoami         who the token is and what they may see
    POST /api/v1/login          {"token": "..."}: checks it, keeps it in an HttpOnly cookie
    POST /api/v1/logout
    GET  /healthz               200 once the cluster was read

A token comes as `Authorization: Bearer`, or in the cookie the login set (EventSource cannot send
headers). Errors answer JSON `kind: Error` with a message that says what to do; never a trace.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Hashable
from pathlib import Path
from typing import Any

from aiohttp import web

from gpupool.adapters import views_json
from gpupool.adapters.web.access import Access, ReviewFailed, Unauthenticated, Viewer
from gpupool.adapters.web.rendered import Doc, Rendered, dumps
from gpupool.adapters.web.source import Snapshot, StateSource
from gpupool.domain.errors import GpupoolError
from gpupool.state.views.errors import UnknownNode, UnknownTenant
from gpupool.state.views.scope import Scope, in_namespace, namespaces_of, visible
from gpupool.state.views.status import StatusView

log = logging.getLogger("gpupool.web")

STATIC = Path(__file__).parent / "static"
COOKIE = "gpupool-token"
KEEPALIVE_S = 15.0  # an SSE comment this often keeps proxies from closing an idle stream
MAX_TOKEN = 16384

Json = dict[str, Any]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

SOURCE: web.AppKey[StateSource] = web.AppKey("source", StateSource)
ACCESS: web.AppKey[Access] = web.AppKey("access", Access)
SECURE: web.AppKey[bool] = web.AppKey("secure", bool)
RENDERED: web.AppKey[Rendered] = web.AppKey("rendered", Rendered)


class Refused(Exception):
    """An answer other than 200, with its message (turned into a JSON error)."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message


def error_doc(code: int, reason: str, message: str) -> Json:
    return views_json.document("Error", {"code": code, "reason": reason, "message": message})


def _json(doc: Json, status: int = 200) -> web.Response:
    return web.Response(
        text=json.dumps(doc, separators=(",", ":")),
        status=status,
        content_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except Refused as err:
        return _json(error_doc(err.code, err.reason, err.message), err.code)
    except Unauthenticated as err:
        return _json(error_doc(401, "Unauthorized", str(err)), 401)
    except ReviewFailed as err:
        return _json(error_doc(503, "ServiceUnavailable", f"{err}; try again shortly"), 503)
    except (UnknownNode, UnknownTenant) as err:
        return _json(error_doc(404, "NotFound", str(err)), 404)
    except GpupoolError as err:
        return _json(error_doc(400, "BadRequest", str(err)), 400)
    except web.HTTPException as err:
        if err.status < 400:
            raise
        return _json(error_doc(err.status, err.reason, err.text or err.reason), err.status)
    except Exception:
        log.exception("the web view failed on %s %s", request.method, request.path)
        return _json(
            error_doc(500, "InternalError", "the web view failed; its log has the details"), 500
        )


def _token(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.cookies.get(COOKIE) or None


async def _viewer(request: web.Request) -> Viewer:
    return await request.app[ACCESS].viewer(_token(request))


def _snapshot(request: web.Request) -> tuple[Snapshot, StatusView]:
    snapshot = request.app[SOURCE].current
    if snapshot.view is None:
        raise Refused(
            503,
            "ServiceUnavailable",
            f"the web view has not read the cluster yet ({snapshot.error or 'starting'}); "
            "reload in a few seconds",
        )
    return snapshot, snapshot.view


async def _scope(request: web.Request, viewer: Viewer, view: StatusView) -> Scope:
    tenants = {t.name for t in view.tenants} | {q.tenant for q in view.queue}
    return await request.app[ACCESS].scope(viewer, namespaces_of(view), tenants)


def _check(
    full: StatusView,
    shown: StatusView,
    scope: Scope,
    tenant: str | None,
    node: str | None,
    namespace: str | None = None,
) -> None:
    """403 for a tenant, node or namespace the viewer may not see; 404 for one not there."""
    if namespace is not None and not scope.sees_namespace(namespace):
        mine = ", ".join(sorted(scope.namespaces)) or "none"
        raise Refused(
            403,
            "Forbidden",
            f"{scope.user} may not read namespace {namespace!r} (RBAC: list gpuleases there); "
            f"the namespaces you may read: {mine}",
        )
    if tenant is not None and not any(t.name == tenant for t in shown.tenants):
        if scope.everything:
            full.check_tenant(tenant)  # raises UnknownTenant with the known names
        mine = ", ".join(t.name for t in shown.tenants) or "none"
        raise Refused(
            403,
            "Forbidden",
            f"{scope.user} may not read tenant {tenant!r} (RBAC: get gpuquotas/{tenant}); "
            f"the tenants you may read: {mine}",
        )
    if node is not None and shown.pool.node(node) is None:
        if scope.nodes:
            full.check_node(node)  # raises UnknownNode
        raise Refused(
            403,
            "Forbidden",
            f"{scope.user} may not list nodes, and node {node!r} holds none of your slices",
        )


def _query(request: web.Request, key: str) -> str | None:
    value = request.query.get(key)
    return value or None


def state_doc(view: StatusView, scope: Scope, tenant: str | None, node: str | None) -> Json:
    return views_json.document(
        "WebState",
        {
            "user": scope.user,
            "operator": scope.everything,
            "status": views_json.status_doc(view, node, tenant),
            "queue": views_json.queue_doc(view, tenant),
            "leases": views_json.leases_doc(view, tenant),
        },
    )


Ask = tuple[str | None, str | None, str | None]  # tenant, node, namespace


def _ask(request: web.Request) -> Ask:
    return _query(request, "tenant"), _query(request, "node"), _query(request, "namespace")


def _document(kind: str, shown: StatusView, scope: Scope, ask: Ask) -> Json:
    tenant, node, _ = ask
    if kind == "state":
        return state_doc(shown, scope, tenant, node)
    if kind == "status":
        return views_json.status_doc(shown, node, tenant)
    if kind == "queue":
        return views_json.queue_doc(shown, tenant)
    return views_json.leases_doc(shown, tenant)


def _render(request: web.Request, snapshot: Snapshot, scope: Scope, kind: str, ask: Ask) -> Doc:
    """The `kind` document of `snapshot` as `scope` may see it, serialised once per snapshot for
    everyone who asks the same (a refusal raises, and is not kept). A `state` document keeps its
    value too: the live stream diffs it."""
    full = snapshot.view
    assert full is not None

    def make() -> Json:
        shown = visible(full, scope)
        tenant, node, namespace = ask
        _check(full, shown, scope, tenant, node, namespace)
        if namespace is not None:
            shown = in_namespace(shown, namespace)
        return _document(kind, shown, scope, ask)

    key = (kind, scope, ask)
    return request.app[RENDERED].get(snapshot.version, key, make, keep_value=kind == "state")


async def _answer(request: web.Request, kind: str) -> web.Response:
    viewer = await _viewer(request)
    snapshot, full = _snapshot(request)
    scope = await _scope(request, viewer, full)
    body = _render(request, snapshot, scope, kind, _ask(request)).body
    response = web.Response(
        body=body, content_type="application/json", headers={"Cache-Control": "no-store"}
    )
    response.enable_compression()  # when the client accepts it: the pool map compresses well
    return response


async def get_state(request: web.Request) -> web.Response:
    return await _answer(request, "state")


async def get_status(request: web.Request) -> web.Response:
    return await _answer(request, "status")


async def get_queue(request: web.Request) -> web.Response:
    return await _answer(request, "queue")


async def get_leases(request: web.Request) -> web.Response:
    return await _answer(request, "leases")


async def get_whoami(request: web.Request) -> web.Response:
    viewer = await _viewer(request)
    _, full = _snapshot(request)
    scope = await _scope(request, viewer, full)
    body = {
        "user": viewer.user,
        "groups": list(viewer.groups),
        "anonymous": viewer.anonymous,
        "operator": scope.everything,
        "nodes": scope.nodes,
        "namespaces": sorted(scope.namespaces),
        "tenants": sorted(scope.tenants),
    }
    return _json(views_json.document("WhoAmI", body))


async def get_events(request: web.Request) -> web.StreamResponse:
    token = _token(request)
    viewer = await _viewer(request)  # refuse before the stream starts: the page shows why
    snapshot, full = _snapshot(request)
    _render(request, snapshot, await _scope(request, viewer, full), "state", _ask(request))
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",
        }
    )
    await response.prepare(request)
    with contextlib.suppress(ConnectionResetError):  # the page went away
        await _stream(request, response, token)
    return response


async def _stream(request: web.Request, response: web.StreamResponse, token: str | None) -> None:
    """Push what changed in the caller's state on every new snapshot, until the caller leaves or
    is refused.

    The first event is the whole document (`event: state`, `id:` its snapshot version). After it,
    a snapshot whose document differs from the one the page holds is sent as `event: patch`,
    `{"base": held version, "version": new, "ops": [...]}` (`delta.diff`: JSON Patch operations
    that turn the held document into the new one); or whole again when the patch would not be
    smaller, or the caller's scope changed (their RBAC did). A snapshot that changes nothing the
    caller sees sends nothing. A page that holds another version than a patch's base fetches the
    whole state again (static/app.js)."""
    access = request.app[ACCESS]
    source = request.app[SOURCE]
    rendered = request.app[RENDERED]
    version = -1
    ask = _ask(request)
    held: tuple[Hashable, Doc] | None = None  # what the page holds: its question and document
    while True:
        snapshot = await source.after(version, KEEPALIVE_S)
        if snapshot is None:
            await response.write(b": keepalive\n\n")
            continue
        version = snapshot.version
        if snapshot.view is None:
            continue
        try:
            viewer = await access.viewer(token)  # a token that expires ends the stream
            scope = await _scope(request, viewer, snapshot.view)
            doc = _render(request, snapshot, scope, "state", ask)
        except Unauthenticated as err:
            await _failure(response, version, error_doc(401, "Unauthorized", str(err)))
            return
        except Refused as err:
            await _failure(response, version, error_doc(err.code, err.reason, err.message))
            return
        except GpupoolError as err:  # UnknownNode, UnknownTenant
            await _failure(response, version, error_doc(404, "NotFound", str(err)))
            return
        key: Hashable = ("state", scope, ask)
        event, data = b"state", doc.body
        if held is not None and held[0] == key:
            base = held[1]
            if doc.body == base.body:
                # nothing the page shows changed: it keeps its version (the base of the next
                # patch), but the old value is let go for the equal new one; a comment keeps
                # the stream from looking idle while others' changes come and go
                held = key, Doc(base.version, doc.body, doc.value)
                await response.write(b": unchanged\n\n")
                continue
            patch = rendered.patch(key, base, doc)
            if patch is not None:
                event, data = b"patch", patch
        held = key, doc
        await response.write(b"event: %s\nid: %d\ndata: %s\n\n" % (event, version, data))


async def _failure(response: web.StreamResponse, version: int, doc: Json) -> None:
    await response.write(b"event: failure\nid: %d\ndata: %s\n\n" % (version, dumps(doc)))


async def post_login(request: web.Request) -> web.Response:
    try:
        body = await request.json()
    except ValueError:
        raise Refused(400, "BadRequest", 'send JSON: {"token": "<bearer token>"}') from None
    token = body.get("token") if isinstance(body, dict) else None
    if not isinstance(token, str) or not token.strip() or len(token) > MAX_TOKEN:
        raise Refused(400, "BadRequest", 'send JSON: {"token": "<bearer token>"} with a token')
    viewer = await request.app[ACCESS].viewer(token.strip())
    response = _json(views_json.document("Login", {"user": viewer.user}))
    response.set_cookie(
        COOKIE,
        token.strip(),
        httponly=True,
        samesite="Strict",
        secure=request.app[SECURE],
        path="/",
    )
    return response


async def post_logout(request: web.Request) -> web.Response:
    response = _json(views_json.document("Logout", {}))
    response.del_cookie(COOKIE, path="/")
    return response


async def get_healthz(request: web.Request) -> web.Response:
    if not request.app[SOURCE].ready.is_set():
        return web.Response(status=503, text="not read the cluster yet\n")
    return web.Response(text="ok\n")


async def get_index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})


async def not_found(request: web.Request) -> web.Response:
    raise Refused(404, "NotFound", f"no such page {request.path!r}; the view is at /")


async def _revalidate(request: web.Request, response: web.StreamResponse) -> None:
    """The page's files are checked on every load, so an upgrade shows at once."""
    if request.path.startswith("/static/"):
        response.headers["Cache-Control"] = "no-cache"


def make_app(source: StateSource, access: Access, *, secure_cookie: bool) -> web.Application:
    app = web.Application(middlewares=[errors], client_max_size=64 * 1024)
    app.on_response_prepare.append(_revalidate)
    app[SOURCE] = source
    app[ACCESS] = access
    app[SECURE] = secure_cookie
    app[RENDERED] = Rendered()
    app.router.add_get("/", get_index)
    app.router.add_static("/static/", STATIC, append_version=False)
    app.router.add_get("/healthz", get_healthz)
    app.router.add_get("/api/v1/state", get_state)
    app.router.add_get("/api/v1/status", get_status)
    app.router.add_get("/api/v1/queue", get_queue)
    app.router.add_get("/api/v1/leases", get_leases)
    app.router.add_get("/api/v1/events", get_events)
    app.router.add_get("/api/v1/whoami", get_whoami)
    app.router.add_post("/api/v1/login", post_login)
    app.router.add_post("/api/v1/logout", post_logout)
    app.router.add_route("*", "/{tail:.*}", not_found)
    return app
