"""Per-card fragmentation for the controller's /metrics, over the state's snapshot.

The measure is FGD's (placement/fragmentation.py: `threshold`, the free share one task of a
shape needs on a card) read per card: the share of a card that is free but below what a common
request needs there, weighted by how common each request is, ÷ the card's whole share. The
common requests are the shapes of the GPU pods the controller sees (queued and admitted;
`TargetWorkload`'s 95% popularity cut-off). Multi-card shapes are judged per card. An idle
cluster, with no GPU pod, has no common request and so no fragmentation.

The series carries `measure="fgd_card"`, so the operator-facing measure placement is gaining can
be exported beside it, or in its place, under the same name.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from gpupool.domain.requests import MILLI, Request
from gpupool.placement.fragmentation import threshold
from gpupool.placement.snapshot import ClusterSnapshot
from gpupool.placement.workload import TargetWorkload

MEASURE = "fgd_card"


def card_fragmentation(
    snap: ClusterSnapshot, requests: Iterable[Request]
) -> npt.NDArray[np.float64]:
    """(nodes × card slots) ratio in 0..1; 0 where no card or no common GPU request."""
    frag = np.zeros(snap.present.shape, dtype=np.float64)
    gpu_requests = [r for r in requests if r.wants_gpu]
    if not gpu_requests or not len(snap):
        return frag
    workload = TargetWorkload.from_requests(gpu_requests)
    weight = 0.0
    for shape, w in zip(workload.shapes, workload.weights, strict=True):
        unusable = snap.share_free < threshold(snap, shape)
        frag += w * np.where(unusable & snap.present, snap.share_free, 0)
        weight += w
    return np.asarray(frag / (weight * MILLI), dtype=np.float64)
