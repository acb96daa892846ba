"""The translation's Events: what the webhook translated on a pod, recorded on the pod and on its
owner, so that it shows for pods a controller makes (kubectl prints an admission warning only to
whoever created the pod: a user for a bare Pod, the ReplicaSet controller for a Deployment's).

At admission the webhook knows the pod's owner (ownerReferences carry its uid) but not the pod's
uid, nor its name when it uses generateName: the API server sets both after the webhooks answer.
So, after answering (never on the answer's path):
- the owner gets an Event right away (one per owner and text for `SAME_WITHIN_S`: a ReplicaSet
  of ten replicas shows the translation once, not ten times);
- the pod gets its Event once it exists: the webhook finds it by the `gpupool.io/translated`
  annotation it stamped, which holds the AdmissionReview's uid (by name when the pod has one,
  else among its namespace's pods with the same labels), retrying for `DELAYS_S` while the API
  server stores it. A pod that never appears (refused by a later admission step) gets none.

Everything here is best effort: a failure is logged, never raised, and never delays a pod.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from lightkube import AsyncClient, codecs
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod

from gpupool.adapters.webhook.mutate import ANN_TRANSLATED
from gpupool.adapters.wire import names
from gpupool.rfc3339 import format_time

log = logging.getLogger("gpupool.webhook")

REASON = "GpuRequestTranslated"
COMPONENT = "gpupool-webhook"
DELAYS_S = (0.2, 0.4, 0.8, 1.6, 3.2, 6.4)  # about 12.6 s in all to find the pod
SAME_WITHIN_S = 600.0
MESSAGE_LIMIT = 1024  # what the API server keeps of an event's message


@dataclass(frozen=True, slots=True)
class Owner:
    api_version: str
    kind: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class TranslationNotice:
    """What to tell of one admitted pod whose GPU request was translated."""

    namespace: str
    name: str  # "" when the pod uses generateName
    generate_name: str
    labels: Mapping[str, str]
    owner: Owner | None
    review: str  # the AdmissionReview's uid, stamped in the pod's gpupool.io/translated
    lines: tuple[str, ...]


def notice_of(
    pod: Mapping[str, Any], namespace: str, review: str, lines: Sequence[str]
) -> TranslationNotice:
    """The notice for `pod` (as it came in the AdmissionReview)."""
    meta = pod.get("metadata") or {}
    owners = [o for o in meta.get("ownerReferences") or () if isinstance(o, Mapping)]
    chosen = next((o for o in owners if o.get("controller")), owners[0] if owners else None)
    owner = (
        Owner(
            str(chosen.get("apiVersion") or ""),
            str(chosen.get("kind") or ""),
            str(chosen.get("name") or ""),
            str(chosen.get("uid") or ""),
        )
        if chosen is not None
        else None
    )
    labels = meta.get("labels") or {}
    return TranslationNotice(
        namespace=namespace,
        name=str(meta.get("name") or ""),
        generate_name=str(meta.get("generateName") or ""),
        labels={str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {},
        owner=owner,
        review=review,
        lines=tuple(lines),
    )


def message(lines: Sequence[str], whose: str = "") -> str:
    text = f"gpupool translated {whose}GPU request: " + "; ".join(lines)
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"


def review_of(pod: Mapping[str, Any]) -> str | None:
    """The AdmissionReview uid the webhook stamped on a stored pod, if any."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(ANN_TRANSLATED)
    try:
        value = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    review = value.get("review") if isinstance(value, dict) else None
    return review if isinstance(review, str) else None


class TranslationEvents(Protocol):
    def record(self, notice: TranslationNotice) -> None:
        """Schedule the Events for `notice`; returns at once."""
        ...


class KubeTranslationEvents:
    """`TranslationEvents` with lightkube: Events (core v1) created in the pod's namespace."""

    def __init__(
        self,
        client: AsyncClient,
        clock: Callable[[], float] = time.time,
        delays_s: Sequence[float] = DELAYS_S,
    ) -> None:
        self.client = client
        self.clock = clock
        self.delays_s = tuple(delays_s)
        self.instance = socket.gethostname()
        self._tasks: set[asyncio.Task[None]] = set()
        self._told: dict[tuple[str, str], float] = {}  # (owner uid, message) → when

    def record(self, notice: TranslationNotice) -> None:
        task = asyncio.get_running_loop().create_task(self.tell(notice))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Stop what is still waiting for a pod (at shutdown)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def tell(self, notice: TranslationNotice) -> None:
        try:
            if notice.owner is not None and notice.owner.uid:
                await self._tell_owner(notice, notice.owner)
            pod = await self._find(notice)
            if pod is None:
                log.info(
                    "no pod of review %s in %s appeared; its translation has no pod Event",
                    notice.review,
                    notice.namespace,
                )
                return
            meta = pod.get("metadata") or {}
            await self._create(
                notice.namespace,
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta.get("name"),
                    "namespace": notice.namespace,
                    "uid": meta.get("uid"),
                },
                message(notice.lines, "the pod's "),
            )
        except asyncio.CancelledError:
            raise
        except Exception as err:  # best effort: the log says it, the pod never waits for it
            log.warning("could not record the translation of review %s: %s", notice.review, err)

    async def _tell_owner(self, notice: TranslationNotice, owner: Owner) -> None:
        text = message(notice.lines, f"a pod's ({notice.name or notice.generate_name + '…'}) ")
        key = (owner.uid, "; ".join(notice.lines))
        now = self.clock()
        self._told = {k: t for k, t in self._told.items() if now - t < SAME_WITHIN_S}
        if key in self._told:
            return
        self._told[key] = now
        await self._create(
            notice.namespace,
            {
                "apiVersion": owner.api_version,
                "kind": owner.kind,
                "name": owner.name,
                "namespace": notice.namespace,
                "uid": owner.uid,
            },
            text,
        )

    async def _find(self, notice: TranslationNotice) -> Mapping[str, Any] | None:
        for delay in (0.0, *self.delays_s):
            await asyncio.sleep(delay)
            try:
                found = await self._look(notice)
            except ApiError as err:
                if err.status.code in (401, 403):
                    raise
                continue
            if found is not None:
                return found
        return None

    async def _look(self, notice: TranslationNotice) -> Mapping[str, Any] | None:
        if notice.name:
            try:
                obj: Any = await self.client.get(Pod, notice.name, namespace=notice.namespace)
            except ApiError as err:
                if err.status.code == 404:
                    return None
                raise
            pod: Mapping[str, Any] = obj.to_dict()
            return pod if review_of(pod) == notice.review else None
        async for item in self.client.list(
            Pod, namespace=notice.namespace, labels=dict(notice.labels) or None
        ):
            each: Any = item
            candidate: Mapping[str, Any] = each.to_dict()
            if review_of(candidate) == notice.review:
                return candidate
        return None

    async def _create(self, namespace: str, involved: Mapping[str, Any], text: str) -> None:
        stamp = format_time(self.clock())
        event: Any = codecs.from_dict(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {
                    "generateName": f"{involved.get('name') or 'pod'}.",
                    "namespace": namespace,
                },
                "involvedObject": dict(involved),
                "reason": REASON,
                "message": text,
                "type": "Normal",
                "source": {"component": COMPONENT},
                "reportingComponent": f"{names.GROUP}/webhook",
                "reportingInstance": self.instance,
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
                "count": 1,
            }
        )
        await self.client.create(event)
