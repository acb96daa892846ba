"""The built-in scenario over time, with tenants: what `gpupool simulate` replays.

Four teams share the built-in pool in one cohort. Three inference teams (`search`, `ads`,
`assistant`) hold long-running slices that arrive through the day; `research` runs notebooks and
bursts of training jobs. Each team's nominal quota is a quarter of the pool's GPUs and half of it
is guaranteed, so research's bursts only run quickly when they may borrow the inference teams'
idle quota — which is what the three replay modes (whole cards, pooled, pooled with borrowing)
show side by side. Research's second burst (10:00) runs into the inference teams' midday wave
(10:30-12:00): with borrowing, the inference teams are within their quota but find the cards held
by research's borrowed jobs, and reclaim room for their pods (notice, 60 s grace, eviction).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from gpupool.domain.devices import Node
from gpupool.domain.requests import MILLI
from gpupool.quota.resource import Resource
from gpupool.quota.spec import TenantQuota
from gpupool.simulator.builtin import SEED, builtin_requests
from gpupool.simulator.openb import TracePod
from gpupool.simulator.tenancy import DEFAULT_COHORT, Tenancy, TenantRule

TEAMS = ("search", "ads", "assistant", "research")
DAY_S = 24 * 3600.0


def builtin_timeline(seed: int = SEED) -> list[TracePod]:
    """The built-in requests with arrival and departure times over one day (QoS = tenant)."""
    rng = random.Random(seed + 1)
    pods: list[TracePod] = []
    for req in builtin_requests(seed):
        if req.name.startswith("train-"):
            burst = rng.choice([1.0, 10.0]) * 3600  # training arrives in bursts
            start = burst + rng.expovariate(1 / 900.0)
            duration = rng.uniform(1.0, 4.0) * 3600
        elif req.name.startswith("notebook-"):
            start = rng.uniform(8, 18) * 3600
            duration = rng.uniform(0.5, 3.0) * 3600
        else:  # inference: a morning fleet, then a second wave at the midday traffic peak
            start = rng.uniform(0, 6) * 3600 if rng.random() < 0.5 else rng.uniform(10.5, 12) * 3600
            duration = rng.uniform(2.0, 10.0) * 3600
        pods.append(
            TracePod(
                request=req,
                creation_time=start,
                deletion_time=start + duration,
                scheduled_time=None,
                qos=req.tenant,
                phase="Succeeded",
            )
        )
    pods.sort(key=lambda p: p.creation_time)
    return pods


def builtin_tenancy(nodes: Sequence[Node]) -> Tenancy:
    capacity = sum(n.gpu_count for n in nodes) * MILLI
    share = capacity // len(TEAMS)
    rules = tuple(
        TenantRule(
            quota=TenantQuota(
                name=team,
                nominal=share,
                guaranteed=share // 2,
                resource=Resource.GPU,
                cohort=DEFAULT_COHORT,
                priority=1 if team != "research" else 0,
                reclaim_grace_s=60.0,
            ),
            qos=(team,),
            pod_priority=1 if team != "research" else 0,
        )
        for team in TEAMS
    )
    return Tenancy(rules=rules)
