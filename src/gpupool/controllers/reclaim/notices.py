"""Notice, grace period, eviction: the writes reclaim and lease expiry share.

A pod to be evicted first gets a notice annotation (`gpupool.io/reclaim-notice` for reclaim,
`gpupool.io/expiry-notice` for an expired lease: the same JSON, `adapters.wire.reclaim_notice`)
and an event; the deadline lives on the pod, so a restarted controller carries on. Once the
deadline passes the pod is evicted through the Eviction API, so PodDisruptionBudgets are
honoured: a refusal (429) is retried every round and recorded once in the notice's `blocked`,
with an `EvictionBlocked` event.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from gpupool.adapters.wire import names
from gpupool.adapters.wire.json_pointer import escape
from gpupool.adapters.wire.reclaim_notice import notice_annotation
from gpupool.ports import ClusterApi, Json
from gpupool.state.notice import ReclaimNotice
from gpupool.state.pods import PodView

log = logging.getLogger("gpupool.controller.notices")


def notice_patch(
    pod: Json, uid: str, notice: ReclaimNotice, annotation: str = names.ANN_RECLAIM_NOTICE
) -> list[Json]:
    """JSON patch: the same pod (uid) gets the notice annotation."""
    annotations = (pod.get("metadata") or {}).get("annotations")
    patch: list[Json] = [{"op": "test", "path": "/metadata/uid", "value": uid}]
    value = notice_annotation(notice)
    if annotations is None:
        patch.append({"op": "add", "path": "/metadata/annotations", "value": {annotation: value}})
    else:
        path = "/metadata/annotations/" + escape(annotation)
        patch.append({"op": "add", "path": path, "value": value})
    return patch


def withdraw_patch(uid: str, annotation: str = names.ANN_RECLAIM_NOTICE) -> list[Json]:
    path = "/metadata/annotations/" + escape(annotation)
    return [
        {"op": "test", "path": "/metadata/uid", "value": uid},
        {"op": "remove", "path": path},
    ]


async def give_notice(
    api: ClusterApi,
    pod: Json,
    view: PodView,
    notice: ReclaimNotice,
    message: str,
    stamp: str,
    *,
    annotation: str = names.ANN_RECLAIM_NOTICE,
    reason: str = "ReclaimNotice",
) -> bool:
    """The notice annotation and a Warning event; False when the pod is gone (or replaced)."""
    patch = notice_patch(pod, view.uid, notice, annotation)
    if not await api.patch_pod(view.namespace, view.name, patch, json_patch=True):
        return False
    log.warning("%s on %s: %s", annotation, view.key, message)
    await api.event(pod, reason, message, warning=True, now_rfc3339=stamp)
    return True


async def evict_noticed(
    api: ClusterApi,
    pod: Json,
    view: PodView,
    notice: ReclaimNotice,
    stamp: str,
    *,
    annotation: str = names.ANN_RECLAIM_NOTICE,
    blocked_why: str,
) -> bool:
    """Evict a pod whose notice's grace period is over: True when the Eviction API took it; a
    refusal is written into the notice once (`blocked`) with an `EvictionBlocked` event
    (`blocked_why` says what the eviction is for) and retried next round."""
    refused = await api.evict_pod(view.namespace, view.name)
    if refused is None:
        return True
    log.info("eviction of %s refused, retrying: %s", view.key, refused)
    if notice.blocked == refused:
        return False  # said so already; the notice carries it
    patch = notice_patch(pod, view.uid, replace(notice, blocked=refused), annotation)
    if await api.patch_pod(view.namespace, view.name, patch, json_patch=True):
        await api.event(
            pod,
            "EvictionBlocked",
            f"{blocked_why}: the Eviction API refused ({refused}); a PodDisruptionBudget "
            f"protects this pod now, retrying later",
            warning=True,
            now_rfc3339=stamp,
        )
    return False
