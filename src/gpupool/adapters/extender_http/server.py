"""The extender's HTTP server (aiohttp): POST /filter, /prioritize, /prioritize-cpu, /bind; GET
/healthz, /metrics.

Paths may carry a prefix (kube-scheduler's `urlPrefix`, e.g. `/gpupool/filter`): the verb is the
last path segment. A body that is not JSON or not extender/v1 is answered 400 with the reason; any
other failure is answered 200 with the extender `Error` field set (what kube-scheduler expects),
never 500.

With leader election only the leader binds. A standby that knows a fresh leader URL (the leader
advertises it on the coordination Lease) forwards the /bind body as it came to that URL's same
path, marked `X-Gpupool-Forwarded: 1`, and answers kube-scheduler with the leader's reply as it
came; a forwarded bind is never forwarded again (a replica that is not leader refuses it). If the
leader cannot be reached within `forward_timeout_s`, or answers anything but a 200 with a JSON
object, the standby answers an extender Error naming the leader URL and the cause.

Bodies are read and written with msgspec's JSON codec: with 5,000 node names each way it is several
times faster than the standard library's (bench/extender_bench.py's `before` mode keeps the
standard library's server in bench/ to measure both in one run).

Callers: given `callers` (the CNs of client certificates that may call, over TLS with a client
CA: `gpupool extender --client-ca`), filter, prioritize and bind answer only a caller whose
verified client certificate names one of them; anyone else gets 403 with a message that says
what is needed. kube-scheduler presents its certificate through its extender `tlsConfig`
(certFile, keyFile). /healthz and /metrics stay open (probes carry no certificate). A standby
forwards binds with `forward_ssl`, its own client certificate, whose CN must be in `callers` too.

`make_app` only wires: the handlers are module-level functions over one `ServerState` (the
extender, its metrics, this replica's place), kept in the app under `STATE`.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import msgspec
import numpy as np
from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from gpupool.adapters.extender_http.filter import REASON_LABELS, ROOM_HELD
from gpupool.adapters.extender_http.informer import WATCHED_KINDS
from gpupool.adapters.extender_http.refusal import Why
from gpupool.adapters.extender_http.service import Extender
from gpupool.adapters.extender_http.wire import (
    MAX_EXTENDER_PRIORITY,
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    MalformedExtenderRequest,
)
from gpupool.adapters.tls import peer_common_name
from gpupool.state.cluster import Drift

log = logging.getLogger(__name__)

MAX_BODY = 64 * 1024 * 1024
BIND_FORWARD_TIMEOUT_S = 4.0  # a standby's /bind forwarded to the leader: room for the leader's
# BIND_WAIT_S and its writes, and 1 s of the 5 s httpTimeout left to answer kube-scheduler an Error
FORWARDED_HEADER = "X-Gpupool-Forwarded"
FORWARD_SESSION = web.AppKey("forward_session", aiohttp.ClientSession)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "gpupool_extender_requests",
            "Extender calls by verb and outcome",
            ["verb", "outcome"],
            registry=r,
        )
        self.latency = Histogram(
            "gpupool_extender_latency_seconds",
            "Extender call latency by verb",
            ["verb"],
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0, 5.0),
            registry=r,
        )
        self.binds = Counter("gpupool_extender_binds", "Bind results", ["outcome"], registry=r)
        self.bind_steps = Histogram(
            "gpupool_extender_bind_step_seconds",
            "Time of each step of bind (wait: for a bind slot; get_pod, list_leases, plan, "
            "create_lease, binding; unreserve: the undo of a failed bind)",
            ["step"],
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
            registry=r,
        )
        self.drift = Counter(
            "gpupool_extender_cache_drift",
            "Objects a resync found different from the cache",
            ["kind"],
            registry=r,
        )
        self.watch_restarts = Counter(
            "gpupool_extender_watch_restarts",
            "Watches of the extender's cache that broke and were resumed from their last "
            "resourceVersion, by kind",
            ["kind"],
            registry=r,
        )
        self.relists = Counter(
            "gpupool_extender_relists",
            "Full lists of the extender's cache after its first, by the kind that asked: its "
            "watch's version was gone (410), or the resync period passed (every kind)",
            ["kind"],
            registry=r,
        )
        for kind in WATCHED_KINDS:
            self.watch_restarts.labels(kind)
            self.relists.labels(kind)
        self.nodes = Gauge("gpupool_extender_nodes", "GPU nodes in the cache", registry=r)
        self.leases = Gauge("gpupool_extender_leases", "GpuLeases in the cache", registry=r)
        self.picks = Gauge(
            "gpupool_extender_picks",
            "Picks /filter answered alone, counted in the cache until their pods' binds",
            registry=r,
        )
        self.picks_expired = Counter(
            "gpupool_extender_picks_expired",
            "Picks let go because their bind did not come within 15 s (kube-scheduler gave the "
            "pod up after /filter)",
            registry=r,
        )
        self.bind_forwards = Counter(
            "gpupool_extender_bind_forwards",
            "Binds a standby forwarded to the leader, by outcome (ok: the leader answered, "
            "error: it could not be reached or its answer was not an extender reply)",
            ["outcome"],
            registry=r,
        )
        self.leader = Gauge(
            "gpupool_extender_leader", "1 while this replica holds the bind lease", registry=r
        )
        self.refusals = Counter(
            "gpupool_extender_refusals",
            "Nodes refused by filter calls and binds refused, by the reason of each refusal",
            ["verb", "reason"],
            registry=r,
        )
        for reason in (*REASON_LABELS, *(w.value for w in Why), ROOM_HELD):
            self.refusals.labels("filter", reason)  # every reason shown from the start, at 0
        for why in Why:
            self.refusals.labels("bind", why.value)
        self.scores = Counter(
            "gpupool_extender_node_scores",
            "Nodes given each score (0..10, kube-scheduler's scale) by prioritize calls",
            ["score"],
            registry=r,
        )
        self._score_series = [self.scores.labels(str(s)) for s in range(MAX_EXTENDER_PRIORITY + 1)]

    # adapters.kubernetes.watch_cache.WatchObserver: the informer's watches
    def watch_restarted(self, kind: str) -> None:
        self.watch_restarts.labels(kind).inc()

    def relisted(self, kind: str) -> None:
        self.relists.labels(kind).inc()

    def record_bind(self, result: ExtenderBindingResult) -> None:
        self.binds.labels("error" if result.error else "ok").inc()
        if result.error:
            self.refusals.labels("bind", result.reason or "Error").inc()

    def record_refusals(self, reason: str, nodes: int) -> None:
        self.refusals.labels("filter", reason).inc(nodes)

    def record_scores(self, scores: np.ndarray) -> None:
        """One increment per distinct score of the call, never one per node."""
        if scores.size:
            counts = np.bincount(scores, minlength=MAX_EXTENDER_PRIORITY + 1)
            for score in np.flatnonzero(counts).tolist():
                self._score_series[score].inc(int(counts[score]))

    def record_drift(self, drift: Drift) -> None:
        self.drift.labels("nodes").inc(drift.nodes)
        self.drift.labels("gpunodes").inc(drift.gpunodes)
        self.drift.labels("leases").inc(drift.leases)


METRICS = web.AppKey("metrics", Metrics)


@dataclass(frozen=True, slots=True)
class ForwardFailed:
    """A bind forwarded to the leader got no extender reply; `reason` says why."""

    reason: str


def _encode(data: Any) -> bytes:
    return data if isinstance(data, bytes) else msgspec.json.encode(data)


@dataclass(frozen=True, slots=True)
class ServerState:
    """What the handlers read (the app's `STATE`): the extender, the metrics, and this replica's
    place. `leader_url` is the leader's advertised URL as this replica knows it (None: unknown or
    stale), `own_url` the URL this replica advertises (never forwarded to)."""

    extender: Extender
    metrics: Metrics
    ready: Callable[[], bool]
    is_leader: Callable[[], bool]
    leader_url: Callable[[], str | None]
    own_url: str | None
    forward_timeout_s: float
    callers: frozenset[str] | None  # None: every caller may call
    forward_ssl: ssl.SSLContext | None


STATE = web.AppKey("state", ServerState)


def make_app(
    extender: Extender,
    *,
    metrics: Metrics | None = None,
    ready: Callable[[], bool] = lambda: True,
    is_leader: Callable[[], bool] = lambda: True,
    leader_url: Callable[[], str | None] = lambda: None,
    own_url: str | None = None,
    forward_timeout_s: float = BIND_FORWARD_TIMEOUT_S,
    callers: frozenset[str] | None = None,
    forward_ssl: ssl.SSLContext | None = None,
) -> web.Application:
    """The extender's app: its routes to the module's handlers, over one `ServerState`."""
    m = metrics or Metrics()
    state = ServerState(
        extender, m, ready, is_leader, leader_url, own_url, forward_timeout_s, callers, forward_ssl
    )
    app = web.Application(client_max_size=MAX_BODY, middlewares=[authenticate])
    app[METRICS] = m
    app[STATE] = state
    app.cleanup_ctx.append(forward_session)
    extender.set_step_timer(lambda step, seconds: m.bind_steps.labels(step).observe(seconds))
    extender.set_refusal_tally(m.record_refusals)
    extender.set_score_sink(m.record_scores)
    extender.set_pick_expiry_sink(m.picks_expired.inc)
    for verb, handler in (
        ("filter", filter_h),
        ("prioritize", prioritize_h),
        ("prioritize-cpu", prioritize_cpu_h),
        ("bind", bind_h),
    ):
        app.router.add_post(f"/{verb}", handler)
        app.router.add_post(f"/{{prefix:.+}}/{verb}", handler)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics_h)
    app.router.add_route("*", "/{tail:.*}", not_found)
    return app


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=_encode(data), status=status, content_type="application/json")


@web.middleware
async def authenticate(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """With `callers`, filter, prioritize and bind answer only a verified client certificate
    that names one of them (403 otherwise); GETs stay open."""
    state = request.app[STATE]
    callers = state.callers
    if callers is None or request.method != "POST":
        return await handler(request)
    transport = request.transport
    name = peer_common_name(transport.get_extra_info("peercert") if transport else None)
    if name in callers:
        return await handler(request)
    state.metrics.requests.labels(request.path.rsplit("/", 1)[-1][:16], "unauthenticated").inc()
    came = f"a client certificate for {name!r}" if name else "no verified client certificate"
    return _json(
        {
            "error": f"gpupool extender: filter, prioritize and bind answer only "
            f"{', '.join(sorted(callers))}, with a client certificate the extender's "
            f"--client-ca signed; this call came with {came}"
        },
        403,
    )


async def forward_session(app: web.Application) -> AsyncIterator[None]:
    """One session for every forward (its connections kept alive); no proxy from the env."""
    forward_ssl = app[STATE].forward_ssl
    connector = aiohttp.TCPConnector(ssl=forward_ssl) if forward_ssl is not None else None
    app[FORWARD_SESSION] = aiohttp.ClientSession(connector=connector)
    yield
    await app[FORWARD_SESSION].close()


def decode(raw: bytes) -> Any:
    try:
        return msgspec.json.decode(raw)
    except (ValueError, msgspec.DecodeError) as err:
        raise MalformedExtenderRequest(f"the body is not JSON: {err}") from None


Run = Callable[[ServerState, Any], Awaitable[Any]]


async def handle_verb(
    request: web.Request, verb: str, run: Run, on_error: Callable[[str], Any]
) -> web.Response:
    """One extender call: `run` over the decoded body; a malformed body is answered 400, any
    other failure 200 with the extender Error (`on_error`), never 500."""
    state = request.app[STATE]
    m = state.metrics
    started = time.perf_counter()
    try:
        reply = await run(state, decode(await request.read()))
        outcome = "ok"
        status = 200
    except MalformedExtenderRequest as err:
        reply, outcome, status = {"error": str(err)}, "bad_request", 400
    except Exception:  # never a 500, never a Python message: kube-scheduler reads Error
        log.exception("%s failed", verb)
        reply, outcome, status = (
            on_error(
                f"gpupool extender: {verb} failed on an internal error (its log has the "
                f"details); kube-scheduler tries the pod again"
            ),
            "error",
            200,
        )
    m.requests.labels(verb, outcome).inc()
    m.latency.labels(verb).observe(time.perf_counter() - started)
    return _json(reply, status)


async def run_filter(state: ServerState, body: Any) -> Any:
    args = ExtenderArgs.from_json(body)
    if not state.ready():
        return ExtenderFilterResult(error="gpupool extender cache is not synced yet").to_json()
    return state.extender.filter(args).to_json()


async def run_prioritize(state: ServerState, body: Any) -> Any:
    return _scored(state, body, state.extender.prioritize_encoded)


async def run_prioritize_cpu(state: ServerState, body: Any) -> Any:
    return _scored(state, body, state.extender.prioritize_cpu_encoded)


def _scored(state: ServerState, body: Any, encode: Callable[[ExtenderArgs], bytes]) -> Any:
    """A prioritize verb's reply: every node 0 until the cache is synced."""
    args = ExtenderArgs.from_json(body)
    if not state.ready():
        return [{"Host": n, "Score": 0} for n in args.node_names]
    return encode(args)


async def run_bind(state: ServerState, body: Any, forwarded: bool = False) -> Any:
    # A replica that becomes leader forgets its ledgers then (LeaderElector's on_elected),
    # not here: a bind is no witness of a lost-and-regained lease between two binds.
    args = ExtenderBindingArgs.from_json(body)
    if not state.is_leader():
        result = ExtenderBindingResult.refused(
            Why.NOT_LEADER,
            "this gpupool extender replica is not the leader"
            + (" (a bind forwarded to it is not forwarded again)" if forwarded else ""),
        )
    elif not state.ready():
        result = ExtenderBindingResult.refused(
            Why.NOT_SYNCED, "gpupool extender cache is not synced yet"
        )
    else:
        result = await state.extender.bind(args)
    state.metrics.record_bind(result)
    return result.to_json()


async def run_forwarded_bind(state: ServerState, body: Any) -> Any:
    return await run_bind(state, body, forwarded=True)


def _bind_error(error: str) -> Any:
    return ExtenderBindingResult(error).to_json()


async def filter_h(request: web.Request) -> web.Response:
    return await handle_verb(
        request, "filter", run_filter, lambda e: ExtenderFilterResult(error=e).to_json()
    )


async def prioritize_h(request: web.Request) -> web.Response:
    return await handle_verb(request, "prioritize", run_prioritize, lambda e: [])


async def prioritize_cpu_h(request: web.Request) -> web.Response:
    return await handle_verb(request, "prioritize-cpu", run_prioritize_cpu, lambda e: [])


async def forward(
    state: ServerState, session: aiohttp.ClientSession, url: str, path: str, raw: bytes
) -> bytes | ForwardFailed:
    """The leader's reply to this bind body, or why there is none."""
    target = url.rstrip("/") + path
    timeout_s = state.forward_timeout_s
    try:
        async with session.post(
            target,
            data=raw,
            headers={FORWARDED_HEADER: "1", "Content-Type": "application/json"},
            timeout=aiohttp.ClientTimeout(total=timeout_s),
            allow_redirects=False,
        ) as resp:
            reply = await resp.read()
            if resp.status != 200:
                text = reply[:200].decode(errors="replace")
                return ForwardFailed(f"HTTP {resp.status}: {text}")
    except TimeoutError:
        return ForwardFailed(f"no reply within {timeout_s:g} s")
    except Exception as err:  # refused, reset, bad URL...: never a 500 to kube-scheduler
        return ForwardFailed(f"{type(err).__name__}: {err}")
    try:
        ok = isinstance(msgspec.json.decode(reply), dict)
    except (ValueError, msgspec.DecodeError):
        ok = False
    return reply if ok else ForwardFailed(f"the reply is not an extender result: {reply[:200]!r}")


async def bind_h(request: web.Request) -> web.Response:
    """Bind here when leader (or when the leader is unknown or is this replica); a standby
    forwards the body to the leader and answers with its reply, or an Error saying why not."""
    if request.headers.get(FORWARDED_HEADER):
        # loop guard: bind here or refuse
        return await handle_verb(request, "bind", run_forwarded_bind, _bind_error)
    state = request.app[STATE]
    m = state.metrics
    url = None if state.is_leader() else state.leader_url()
    if not url or url == state.own_url:
        return await handle_verb(request, "bind", run_bind, _bind_error)
    started = time.perf_counter()
    raw = await request.read()
    try:
        ExtenderBindingArgs.from_json(decode(raw))  # a malformed body is ours to refuse
    except MalformedExtenderRequest as err:
        m.requests.labels("bind", "bad_request").inc()
        return _json({"error": str(err)}, 400)
    reply = await forward(state, request.app[FORWARD_SESSION], url, request.path, raw)
    if isinstance(reply, bytes):
        m.bind_forwards.labels("ok").inc()
        m.requests.labels("bind", "forwarded").inc()
    else:
        log.warning("bind forwarded to the leader at %s failed: %s", url, reply.reason)
        m.bind_forwards.labels("error").inc()
        m.requests.labels("bind", "error").inc()
        error = f"the bind forwarded to the gpupool extender leader at {url} failed: {reply.reason}"
        failed = ExtenderBindingResult.refused(Why.FORWARD_FAILED, error)
        m.record_bind(failed)
        reply = _encode(failed.to_json())
    m.latency.labels("bind").observe(time.perf_counter() - started)
    return _json(reply)


async def healthz(request: web.Request) -> web.Response:
    if not request.app[STATE].ready():
        return web.Response(text="cache not synced\n", status=503)
    return web.Response(text="ok\n")


async def metrics_h(request: web.Request) -> web.Response:
    state = request.app[STATE]
    m, ready = state.metrics, state.ready()
    m.nodes.set(len(state.extender.cache.snapshot()) if ready else 0)
    m.leases.set(len(state.extender.cache.leases))
    m.picks.set(len(state.extender.cache.picks()))
    m.leader.set(1 if state.is_leader() else 0)
    return web.Response(
        body=generate_latest(m.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


async def not_found(request: web.Request) -> web.Response:
    return _json({"error": f"unknown extender verb {request.path!r}"}, 404)
