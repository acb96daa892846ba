"""The translation's Events: the server schedules them after answering (never on the answer's
path), and `KubeTranslationEvents` records one on the owner at once (once per owner and text)
and one on the pod once the pod the webhook admitted exists, found by the review uid it stamped
(by name, or among the namespace's pods with its labels for a generateName pod); failures and a
pod that never appears are logged, not raised."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from types import MappingProxyType
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from lightkube.core.exceptions import ApiError

from gpupool.adapters.webhook.cards import Card
from gpupool.adapters.webhook.events import (
    REASON,
    KubeTranslationEvents,
    TranslationNotice,
    message,
    notice_of,
)
from gpupool.adapters.webhook.server import MUTATE_PODS, build_app
from gpupool.domain.units import GiB
from gpupool.quota.spec import TenantQuota

OWNER = {
    "apiVersion": "apps/v1",
    "kind": "ReplicaSet",
    "name": "infer-5d8f",
    "uid": "rs-uid",
    "controller": True,
}


def _pod(name: str, review: str | None, labels: Mapping[str, str]) -> dict[str, Any]:
    annotations = (
        {}
        if review is None
        else {"gpupool.io/translated": json.dumps({"review": review, "lines": ["x"]})}
    )
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "labels": dict(labels),
            "annotations": annotations,
        }
    }


class _Obj:
    def __init__(self, body: Mapping[str, Any]) -> None:
        self.body = dict(body)

    def to_dict(self) -> dict[str, Any]:
        return self.body


class _Response:
    status_code = 404
    headers: Mapping[str, str] = MappingProxyType({})

    def json(self) -> dict[str, Any]:
        return {"kind": "Status", "code": 404, "message": "not found"}


class FakeClient:
    """Pods appear after `appear_after` reads; every created Event is kept."""

    def __init__(self, pods: list[dict[str, Any]], appear_after: int = 0) -> None:
        self.pods = pods
        self.appear_after = appear_after
        self.reads = 0
        self.created: list[dict[str, Any]] = []
        self.listed_labels: list[Any] = []

    def _visible(self) -> list[dict[str, Any]]:
        self.reads += 1
        return self.pods if self.reads > self.appear_after else []

    async def get(self, _kind: Any, name: str, namespace: str) -> _Obj:
        for p in self._visible():
            if p["metadata"]["name"] == name:
                return _Obj(p)
        raise ApiError(response=_Response())  # type: ignore[arg-type]

    async def list(self, _kind: Any, namespace: str, labels: Any = None) -> AsyncIterator[_Obj]:
        self.listed_labels.append(labels)
        for p in self._visible():
            if all(p["metadata"]["labels"].get(k) == v for k, v in (labels or {}).items()):
                yield _Obj(p)

    async def create(self, obj: Any) -> None:
        self.created.append(obj.to_dict())


def _notice(name: str = "", owner: bool = True, review: str = "r1") -> TranslationNotice:
    pod = {
        "metadata": {
            "name": name,
            "generateName": "" if name else "infer-5d8f-",
            "labels": {"app": "infer"},
            **({"ownerReferences": [OWNER]} if owner else {}),
        }
    }
    return notice_of(pod, "ns", review, ("line one", "line two"))


def _tell(client: FakeClient, *notices: TranslationNotice) -> FakeClient:
    events = KubeTranslationEvents(client, clock=lambda: 0.0, delays_s=(0.0,) * 4)  # type: ignore[arg-type]

    async def run() -> None:
        for n in notices:
            await events.tell(n)

    asyncio.run(run())
    return client


def test_a_generate_name_pod_gets_its_event_and_its_owner_one() -> None:
    client = FakeClient(
        [
            _pod("infer-5d8f-aaaaa", "another-review", {"app": "infer"}),
            _pod("infer-5d8f-bbbbb", "r1", {"app": "infer"}),
        ],
        appear_after=2,
    )
    _tell(client, _notice())
    owner, on_pod = client.created
    assert owner["involvedObject"] == {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": "infer-5d8f",
        "namespace": "ns",
        "uid": "rs-uid",
    }
    assert owner["reason"] == REASON and owner["type"] == "Normal"
    assert owner["message"] == (
        "gpupool translated a pod's (infer-5d8f-…) GPU request: line one; line two"
    )
    assert on_pod["involvedObject"]["name"] == "infer-5d8f-bbbbb"  # the one of this review
    assert on_pod["involvedObject"]["uid"] == "uid-infer-5d8f-bbbbb"
    assert on_pod["message"] == "gpupool translated the pod's GPU request: line one; line two"
    assert on_pod["metadata"]["generateName"] == "infer-5d8f-bbbbb."
    assert client.listed_labels[-1] == {"app": "infer"}


def test_the_owner_hears_of_one_text_once_and_each_pod_of_its_own() -> None:
    client = FakeClient([_pod("a", "r1", {"app": "infer"}), _pod("b", "r2", {"app": "infer"})])
    _tell(client, _notice(review="r1"), _notice(review="r2"))
    kinds = [e["involvedObject"]["kind"] for e in client.created]
    assert kinds == ["ReplicaSet", "Pod", "Pod"]
    assert [e["involvedObject"]["name"] for e in client.created[1:]] == ["a", "b"]


def test_a_named_pod_is_read_by_name_and_must_carry_the_review() -> None:
    client = FakeClient([_pod("solo", "r1", {})])
    _tell(client, _notice(name="solo", owner=False))
    [on_pod] = client.created
    assert on_pod["involvedObject"]["name"] == "solo"
    stale = FakeClient([_pod("solo", "an-older-review", {})])
    _tell(stale, _notice(name="solo", owner=False))
    assert stale.created == []  # not the pod this review admitted


def test_a_pod_that_never_appears_gets_no_event_and_nothing_is_raised() -> None:
    client = FakeClient([_pod("x", "r1", {"app": "infer"})], appear_after=100)
    _tell(client, _notice())
    assert [e["involvedObject"]["kind"] for e in client.created] == ["ReplicaSet"]
    assert client.reads == 5  # one look and one per delay, then it gives up


def test_a_failing_api_server_is_logged_not_raised() -> None:
    class Broken(FakeClient):
        async def create(self, obj: Any) -> None:
            raise ConnectionError("refused")

    _tell(Broken([_pod("a", "r1", {"app": "infer"})]), _notice())  # returns


def test_a_long_message_is_cut_to_what_the_api_server_keeps() -> None:
    text = message(["x" * 600, "y" * 600])
    assert len(text) == 1024 and text.endswith("…")


# ---- the server ---------------------------------------------------------------------------------


class Lookups:
    async def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        return {}

    async def quotas(self) -> list[TenantQuota]:
        return []

    async def cards(self) -> tuple[Card, ...]:
        return (Card("A100-80GB", 72 * GiB, 80 * GiB),)

    async def gang_members(self, namespace: str, gang: str) -> list[Mapping[str, Any]]:
        return []

    async def lease_ttl(self, tenant: str) -> float | None:
        return None


class Recorder:
    def __init__(self) -> None:
        self.notices: list[TranslationNotice] = []

    def record(self, notice: TranslationNotice) -> None:
        self.notices.append(notice)


def _review(uid: str, limits: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "operation": "CREATE",
            "namespace": "ns",
            "object": {
                "metadata": {"generateName": "infer-", "ownerReferences": [OWNER]},
                "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
            },
        },
    }


def test_the_server_schedules_the_events_of_a_translated_pod_only() -> None:
    recorder = Recorder()

    async def run() -> list[dict[str, Any]]:
        app = build_app(Lookups(), lambda: 0.0, events=recorder)
        async with TestClient(TestServer(app)) as client:
            answers = []
            for uid, limits in (
                ("u1", {"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "50"}),
                ("u2", {"gpupool.io/gpu-memory": "1Gi"}),
                ("u3", {"nvidia.com/gpumem-percentage": "500"}),
            ):
                response = await client.post(MUTATE_PODS, json=_review(uid, limits))
                answers.append((await response.json())["response"])
            return answers

    translated, native, refused = asyncio.run(run())
    assert translated["allowed"] and native["allowed"] and not refused["allowed"]
    [notice] = recorder.notices
    assert notice.review == "u1" and notice.namespace == "ns"
    assert notice.owner is not None and notice.owner.uid == "rs-uid"
    assert notice.lines == tuple(translated["warnings"])
    assert "gpupool.io/gpu-memory: 40Gi on each of 2 cards" in notice.lines[1]
