"""How much of the cluster a request is, in milli-GPU, before anyone has placed it.

Shares and whole cards are their own measure. A byte request is measured against the mean
memory of the cards it accepts (and never below its compute share), so a 12Gi slice counts as
0.15 GPU in a pool of 80GB cards and 0.5 GPU in a pool of 24GB cards. Allocated capacity, by
contrast, is read off the cards after placement.
"""

from __future__ import annotations

import numpy as np

from gpupool.domain.requests import MILLI, Request
from gpupool.placement.filters import model_mask
from gpupool.placement.snapshot import ClusterSnapshot


def nominal_gpu_milli(snap: ClusterSnapshot, req: Request) -> int:
    if req.gpu_milli is not None or not req.wants_gpu:
        return req.gpu_request_milli
    cards = model_mask(snap, req) & snap.mem_known
    if not cards.any():
        return req.compute_milli
    mean_memory = float(snap.gmem_total[cards].mean())
    share = int(np.ceil((req.gpu_memory_bytes or 0) * MILLI / mean_memory))
    return max(min(share, MILLI), req.compute_milli) * req.gpu_count
