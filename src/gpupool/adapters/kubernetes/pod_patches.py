"""The pod writes of the controllers' port (`ports.ClusterApi.admit_pod`, `annotate_pod`) as the
patches the API server takes: built here, from the decoded `PodView`, so that the reconcilers
say what they want written and the optimistic concurrency stays at the edge.

A write that must not land on another pod (a pod deleted and made again under the same name) is
a JSON patch whose first op tests the uid; the admission also tests that the quota gate is where
the view saw it. A failed test is the API server's 422: the adapter answers False (changed under
us) and the next round decides again from what it then holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpupool.adapters.wire import names
from gpupool.adapters.wire.json_pointer import escape
from gpupool.state.pods import PodView

Patch = list[dict[str, Any]]
ANNOTATIONS = "/metadata/annotations"


def admit_patch(pod: PodView, admitted: str) -> Patch:
    """The JSON patch that admits a pod: checks it is the same pod still gated, removes the
    gate and writes `gpupool.io/admitted` (and drops `gpupool.io/queue`) in the same patch, so a
    crash can never leave a pod admitted without the record quota counting needs."""
    patch: Patch = [
        {"op": "test", "path": "/metadata/uid", "value": pod.uid},
        {
            "op": "test",
            "path": f"/spec/schedulingGates/{pod.gate_index}/name",
            "value": names.QUOTA_GATE,
        },
        {"op": "remove", "path": f"/spec/schedulingGates/{pod.gate_index}"},
    ]
    if not pod.annotated:
        patch.append({"op": "add", "path": ANNOTATIONS, "value": {names.ANN_ADMITTED: admitted}})
        return patch
    patch.append({"op": "add", "path": f"{ANNOTATIONS}/{escape(names.ANN_ADMITTED)}",
                  "value": admitted})  # fmt: skip
    if pod.queue_note is not None:
        patch.append({"op": "remove", "path": f"{ANNOTATIONS}/{escape(names.ANN_QUEUE)}"})
    return patch


def annotate_patch(pod: PodView, annotations: Mapping[str, str | None]) -> Patch:
    """JSON patch: the same pod (uid) gets `annotations` (None: the annotation is removed; a
    removal of one it does not carry fails the patch, as a changed pod does)."""
    patch: Patch = [{"op": "test", "path": "/metadata/uid", "value": pod.uid}]
    added = {k: v for k, v in annotations.items() if v is not None}
    if not pod.annotated and added:
        patch.append({"op": "add", "path": ANNOTATIONS, "value": added})
        return patch
    for key, value in annotations.items():
        path = f"{ANNOTATIONS}/{escape(key)}"
        if value is None:
            patch.append({"op": "remove", "path": path})
        else:
            patch.append({"op": "add", "path": path, "value": value})
    return patch


def annotate_merge(annotations: Mapping[str, str | None]) -> dict[str, Any]:
    """Merge patch: set (None: remove) annotations on whatever pod has the name now."""
    return {"metadata": {"annotations": dict(annotations)}}
