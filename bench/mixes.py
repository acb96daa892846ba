"""Synthetic stand-ins for the pod lists the shared trace holds back (`multigpu*`, `gpuspec*`).

Both start from `openb_pod_list_default.csv` and change one feature, the way the trace's own
variants do (`gpushareNN` resamples GPU tasks; `cpuNNN` changes the CPU-only tasks):

- `multigpu(base, fraction, seed)`: a random `fraction` of the GPU tasks is replaced by copies of
  the trace's own multi-GPU tasks (2, 4 or 8 whole GPUs, drawn uniformly from the 75 in
  `default`, so their CPU and memory stay what real multi-GPU tasks ask: 8-GPU tasks ask 64-120
  cores, which only the large G2, G3 and V100 nodes have).
- `multislice(base, fraction, seed)`: a random `fraction` of the tasks asking a share of one GPU
  ask it on each of 2 or 4 cards (multi-card slices, which no trace list has).
- `gpuspec(base, nodes, fraction, seed)`: a random `fraction` of the GPU tasks may run only on
  given models. A user restricts a task to a model the cluster has and that can host it (enough
  cards and CPU on one node), so each restricted task draws its model among those, with
  probability proportional to the cards of that model on the nodes that could host it: a
  cluster's cards stand for the demand its owners bought them for. The most common card (G2
  here) is thus the most common restriction, then T4 and the older families; and since most
  tasks ask one GPU or a share of one, so do most restricted tasks. A task drawn to a V100
  accepts both V100 sizes half of the time (users name a family as often as a size).

Deterministic per seed; the base list is not changed.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

from gpupool.domain.devices import Node
from gpupool.domain.requests import Request

FAMILIES = {"V100-16GB": ("V100-16GB", "V100-32GB"), "V100-32GB": ("V100-16GB", "V100-32GB")}


def multigpu(base: Sequence[Request], fraction: float, seed: int = 7) -> list[Request]:
    rng = random.Random(seed)
    multi = [r for r in base if r.gpu_count > 1]
    gpu_rows = [i for i, r in enumerate(base) if r.wants_gpu]
    already = sum(1 for i in gpu_rows if base[i].gpu_count > 1)
    want = max(0, round(fraction * len(gpu_rows)) - already)
    single = [i for i in gpu_rows if base[i].gpu_count == 1]
    out = list(base)
    for n, i in enumerate(rng.sample(single, want)):
        out[i] = replace(rng.choice(multi), name=f"{base[i].name}-m{n}")
    return out


def converted(base: Sequence[Request], fraction: float, seed: int = 7) -> list[Request]:
    """The first stand-in: a `fraction` of the 1-GPU tasks become 2-, 4- or 8-GPU tasks (5:3:2)
    and keep their CPU request, so multi-GPU tasks ask little CPU (unlike the trace's own)."""
    rng = random.Random(seed)
    out = []
    for r in base:
        if r.gpu_count == 1 and r.whole_cards and rng.random() < fraction:
            r = replace(r, gpu_count=rng.choices([2, 4, 8], [5, 3, 2])[0])
        out.append(r)
    return out


def multislice(
    base: Sequence[Request], fraction: float, seed: int = 7, whole: bool = False
) -> list[Request]:
    """A `fraction` of the tasks that ask for a share of one GPU instead ask for that share on
    each of 2 or 4 cards (2:1), keeping their CPU and memory: tensor-parallel inference as HAMi
    users write it (`nvidia.com/gpu: 2` with `gpumem-percentage: 30`). No trace list has such
    tasks (the openb format refuses a share of several GPUs), so this mix is their only test.
    `whole`: the same tasks take their cards whole (what gpupool gave them before issue 27)."""
    rng = random.Random(seed)
    out = []
    for r in base:
        if r.gpu_count == 1 and not r.whole_cards and rng.random() < fraction:
            cards = rng.choices([2, 4], [2, 1])[0]
            r = replace(r, gpu_count=cards, gpu_milli=1000 if whole else r.gpu_milli)
        out.append(r)
    return out


def hosts(nodes: Sequence[Node], req: Request) -> dict[str, int]:
    """Cards per model on the nodes that could host `req` alone (cards and CPU)."""
    cards: dict[str, int] = defaultdict(int)
    for node in nodes:
        if node.gpu_count >= req.gpu_count and node.cpu_milli >= req.cpu_milli:
            cards[node.gpus[0].model] += node.gpu_count
    return dict(sorted(cards.items()))


def gpuspec(
    base: Sequence[Request], nodes: Sequence[Node], fraction: float, seed: int = 7
) -> list[Request]:
    rng = random.Random(seed)
    out = []
    for r in base:
        if r.wants_gpu and rng.random() < fraction:
            cards = hosts(nodes, r)
            if cards:
                model = rng.choices(list(cards), list(cards.values()))[0]
                family = FAMILIES.get(model)
                models = family if family and rng.random() < 0.5 else (model,)
                r = replace(r, models=models)
        out.append(r)
    return out


MIXES = {
    "multigpu30": lambda base, nodes: multigpu(base, 0.30),
    "multigpu40": lambda base, nodes: multigpu(base, 0.40),
    "multigpu50": lambda base, nodes: multigpu(base, 0.50),
    "multigpu30c": lambda base, nodes: converted(base, 0.30),
    "gpuspec25": lambda base, nodes: gpuspec(base, nodes, 0.25),
    "gpuspec33": lambda base, nodes: gpuspec(base, nodes, 1 / 3),
    "multislice25": lambda base, nodes: multislice(base, 0.25),
    "multislice25whole": lambda base, nodes: multislice(base, 0.25, whole=True),
}
