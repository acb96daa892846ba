"""Fuzzing the webhook through its real HTTPS server (aiohttp, TLS, the real routes and
decisions): AdmissionReview bodies of random JSON shapes and values, near a pod's and a
GpuQuota's real fields. The server never answers 500, never a Python message, and always either
a 400 for a body that is not an AdmissionReview or an AdmissionReview for the request's uid.

Only the lookups (namespace labels, quotas, cards from the API server) are a fake: a small
honest one of the webhook's own `Lookups` interface.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupool.adapters.webhook.certs import ensure_serving_cert
from gpupool.adapters.webhook.server import MUTATE_PODS, VALIDATE_QUOTAS, build_app, serve
from gpupool.adapters.wire import names
from gpupool.domain.units import GiB
from gpupool.quota.spec import TenantQuota

PYTHON_WORDS = (
    "object has no attribute",
    "KeyError",
    "Traceback",
    "NoneType",
    "TypeError",
    "ValueError",
    "not subscriptable",
    "unhashable type",
    "not iterable",
    "invalid literal",
)


class FakeLookups:
    """The webhook's `Lookups` with fixed answers: a tenant namespace, no quotas, two cards."""

    async def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        return {names.LABEL_TENANT: "team-a"} if namespace == "team-a" else {}

    async def quotas(self) -> list[TenantQuota]:
        return []

    async def cards(self) -> tuple[tuple[str, int], ...]:
        return (("A100-80GB", 72 * GiB), ("A100-80GB", 72 * GiB))

    async def gang_members(self, namespace: str, gang: str) -> list[Mapping[str, Any]]:
        return []

    async def lease_ttl(self, tenant: str) -> float | None:
        return None


class BrokenLookups(FakeLookups):
    """Lookups that fail as a bug or an unreachable API server would."""

    async def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        raise ConnectionError("[Errno 111] Connection refused")

    async def quotas(self) -> list[TenantQuota]:
        raise AttributeError("'NoneType' object has no attribute 'items'")

    async def cards(self) -> tuple[tuple[str, int], ...]:
        raise KeyError("status")


class NoGpuNodes(FakeLookups):
    async def cards(self) -> tuple[tuple[str, int], ...]:
        raise ConnectionError("the API server is restarting")


class Server:
    def __init__(self, folder: Path, lookups: FakeLookups | None = None) -> None:
        self.lookups = lookups or FakeLookups()
        self.cert = ensure_serving_cert(folder, ("127.0.0.1",))
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.port = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        app = build_app(self.lookups, lambda: dt.datetime(2026, 1, 2, tzinfo=dt.UTC).timestamp())
        self.runner = self.loop.run_until_complete(serve(app, "127.0.0.1", 0, self.cert))
        self.port = self.runner.addresses[0][1]
        self.ready.set()
        self.loop.run_forever()

    def start(self) -> None:
        self.thread.start()
        assert self.ready.wait(timeout=30), "the webhook server did not start"

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)

    def post(self, path: str, body: bytes) -> tuple[int, Any]:
        context = ssl.create_default_context(cafile=str(self.cert.ca))
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
        )
        request = urllib.request.Request(
            f"https://127.0.0.1:{self.port}{path}", data=body, method="POST"
        )
        request.add_header("Content-Type", "application/json")
        try:
            with opener.open(request, timeout=30) as resp:
                return int(resp.status), json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"null")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = Server(tmp_path_factory.mktemp("webhook-fuzz"))
    running.start()
    yield running
    running.stop()


# ---- random JSON, near the fields gpupool reads ---------------------------------------------

FIELDS = (
    "metadata", "spec", "name", "namespace", "generateName", "labels", "annotations",
    "containers", "initContainers", "ephemeralContainers", "resources", "limits", "requests",
    "schedulingGates", "nodeName", "schedulerName", "priority", "nominal", "guaranteed",
    "cohort", "borrowLimit", "resource", "maxPods", "budget",
    *names.USER_RESOURCES, names.RES_VGPU, *names.USER_ANNOTATIONS, *names.SYSTEM_ANNOTATIONS,
    names.LABEL_TENANT, "cpu",
)  # fmt: skip
VALUES = (
    "1",
    "12Gi",
    "1000Gi",
    "0",
    "-3",
    "1500m",
    "A100-80GB",
    "H800|T4",
    "true",
    "mps",
    "binpack",
)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=False)
    | st.sampled_from(VALUES)
    | st.text(max_size=12)
)
keys = st.sampled_from(FIELDS) | st.text(max_size=8)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=5),
    max_leaves=30,
)


def _mostly(usual: st.SearchStrategy[Any], rare: st.SearchStrategy[Any]) -> Any:
    return st.integers(0, 9).flatmap(lambda i: usual if i < 8 else rare)


# Mostly well-formed pods with random parts, so the fuzzing reaches the decisions too.
gpu_asks = st.dictionaries(
    _mostly(st.sampled_from((*names.USER_RESOURCES, names.RES_VGPU, "cpu")), keys),
    _mostly(st.sampled_from(VALUES) | st.integers(-5, 200), json_values),
    max_size=4,
)
resources = st.fixed_dictionaries(
    {},
    optional={"limits": _mostly(gpu_asks, json_values), "requests": _mostly(gpu_asks, json_values)},
)
SYSTEM = names.SYSTEM_ANNOTATIONS
annotations = st.dictionaries(
    _mostly(
        st.sampled_from(names.USER_ANNOTATIONS), st.sampled_from(names.SYSTEM_ANNOTATIONS) | keys
    ),
    _mostly(st.sampled_from(VALUES), json_values),
    max_size=4,
)
container = st.fixed_dictionaries(
    {}, optional={"name": json_values, "resources": resources | json_values}
)
pods = st.fixed_dictionaries(
    {},
    optional={
        "metadata": st.fixed_dictionaries(
            {},
            optional={
                "name": json_values,
                "annotations": annotations,
                "labels": json_values,
            },
        )
        | json_values,
        "spec": st.fixed_dictionaries(
            {},
            optional={
                "containers": st.lists(container | json_values, max_size=3) | json_values,
                "initContainers": st.lists(container, max_size=2) | json_values,
                "schedulingGates": json_values,
                "schedulerName": json_values,
                "nodeName": json_values,
                "priority": json_values,
            },
        )
        | json_values,
    },
)
# Pods shaped as the API server sends them, with random GPU asks and annotations.
gpu_pods = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries(
            {"name": st.just("p"), "annotations": annotations},
            optional={"labels": st.dictionaries(keys, st.sampled_from(VALUES))},
        ),
        "spec": st.fixed_dictionaries(
            {
                "containers": st.lists(
                    st.fixed_dictionaries(
                        {"name": st.sampled_from(["main", "side"]), "resources": resources}
                    ),
                    min_size=1,
                    max_size=2,
                )
            },
            optional={
                "initContainers": st.lists(container, max_size=1),
                "schedulerName": st.sampled_from(["default-scheduler", "volcano"]),
                "nodeName": st.just("node-1"),
                "priority": st.integers(-10, 10),
            },
        ),
    }
)
quotas = st.fixed_dictionaries(
    {},
    optional={
        "metadata": json_values,
        "spec": st.dictionaries(keys, st.sampled_from(VALUES) | json_values) | json_values,
    },
)
requests = st.fixed_dictionaries(
    {
        "uid": _mostly(st.just("fuzz"), json_values),
        "operation": _mostly(
            st.just("CREATE"), st.sampled_from(["UPDATE", "DELETE"]) | json_values
        ),
        "object": _mostly(gpu_pods | pods, quotas | json_values),
    },
    optional={
        "namespace": st.sampled_from(["team-a", "ns"]) | json_values,
        "oldObject": pods | json_values,
    },
)
envelope = {"apiVersion": st.just("admission.k8s.io/v1"), "kind": st.just("AdmissionReview")}
reviews = st.fixed_dictionaries({**envelope, "request": requests})
# Mostly AdmissionReviews; now and then a shape that is none (the 400 path).
odd_bodies = st.one_of(
    st.fixed_dictionaries({}, optional={**envelope, "request": requests | json_values}),
    st.dictionaries(keys, json_values),
    json_values,
)
bodies = st.integers(0, 9).flatmap(lambda i: reviews if i < 8 else odd_bodies)


def _check(status: int, body: Any, sent: Any) -> None:
    text = json.dumps(body)
    assert not [w for w in PYTHON_WORDS if w in text], text
    assert status in (200, 400), (status, text)
    if status == 400:
        assert isinstance(body, dict) and isinstance(body.get("error"), str), text
        return
    response = body["response"]
    assert body["kind"] == "AdmissionReview" and response["uid"] == sent["request"]["uid"]
    assert isinstance(response["allowed"], bool)
    if not response["allowed"]:
        assert response["status"]["code"] != 500, f"a bug answered as a denial: {text}"
        assert response["status"]["message"], text


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(body=bodies, path=st.sampled_from([MUTATE_PODS, VALIDATE_QUOTAS]))
def test_no_body_gets_a_500_or_a_python_message(server: Server, body: Any, path: str) -> None:
    status, answer = server.post(path, json.dumps(body).encode())
    _check(status, answer, body)


@pytest.mark.parametrize(
    "obj",
    [
        {"spec": {"containers": "nope"}},
        {"spec": {"containers": [{"name": "m", "resources": {"limits": "all"}}]}},
        {"metadata": {"annotations": None}, "spec": {"containers": [None]}},
        {"spec": {"containers": [{"resources": {"limits": {names.RES_GPU_MEMORY: {}}}}]}},
    ],
)
def test_the_shapes_that_used_to_crash_get_our_own_sentence(server: Server, obj: Any) -> None:
    sent = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u", "operation": "CREATE", "namespace": "ns", "object": obj},
    }
    status, answer = server.post(MUTATE_PODS, json.dumps(sent).encode())
    _check(status, answer, sent)
    assert answer["response"]["allowed"] is False
    assert " must be " in answer["response"]["status"]["message"]


def test_a_body_that_is_not_json_gets_a_400_in_our_words(server: Server) -> None:
    status, answer = server.post(MUTATE_PODS, b"{not json")
    assert status == 400 and answer == {"error": "the body is not JSON"}


def test_a_bug_or_an_unreachable_api_server_is_answered_in_our_words(tmp_path: Path) -> None:
    broken = Server(tmp_path, BrokenLookups())
    broken.start()
    try:
        pod = {"spec": {"containers": [{"name": "m", "resources": {"limits": {"cpu": "1"}}}]}}
        quota = {"metadata": {"name": "a"}, "spec": {"nominal": "1Gi"}}
        answers = {}
        for path, obj in ((MUTATE_PODS, pod), (VALIDATE_QUOTAS, quota)):
            sent = {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {"uid": "u", "operation": "CREATE", "namespace": "ns", "object": obj},
            }
            status, answer = broken.post(path, json.dumps(sent).encode())
            assert status == 200
            text = json.dumps(answer)
            assert not [w for w in (*PYTHON_WORDS, "Errno", "items") if w in text], text
            answers[path] = answer["response"]
    finally:
        broken.stop()
    pods, quotas = answers[MUTATE_PODS], answers[VALIDATE_QUOTAS]
    assert pods["allowed"] is False and pods["status"]["code"] == 503
    assert "cannot read namespace 'ns'" in pods["status"]["message"]
    assert quotas["allowed"] is False and quotas["status"]["code"] == 500
    assert "the gpupool webhook failed on this request" in quotas["status"]["message"]
    assert "request u" in quotas["status"]["message"]


@pytest.mark.parametrize(
    ("lookups", "expected"),
    [
        (FakeLookups(), "the largest card in this cluster (A100-80GB) has 72Gi allocatable"),
        (NoGpuNodes(), "the largest GPU gpupool knows has"),  # GpuNodes unreadable: catalogue
    ],
)
def test_the_request_is_bounded_by_the_clusters_cards_else_the_catalogue(
    tmp_path: Path, lookups: FakeLookups, expected: str
) -> None:
    running = Server(tmp_path, lookups)
    running.start()
    try:
        limits = {names.RES_GPU_MEMORY: "1000Gi"}
        pod = {"spec": {"containers": [{"name": "m", "resources": {"limits": limits}}]}}
        sent = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": "u", "operation": "CREATE", "namespace": "ns", "object": pod},
        }
        status, answer = running.post(MUTATE_PODS, json.dumps(sent).encode())
    finally:
        running.stop()
    assert status == 200 and answer["response"]["allowed"] is False
    assert expected in answer["response"]["status"]["message"]
