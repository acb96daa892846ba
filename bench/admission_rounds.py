"""The admission round owed one pod change, at several cluster sizes: what it costs beyond its
writes, with what the controller keeps between rounds (`kept`: the pods' borrowed marks, the
admitted pods' charges and the leases' core leases for the budget meter, `controllers.kept.Kept`;
each group of tenants' plan while the group is at rest, `admission.groups.GroupPlans`) and with
all of it made afresh each round (`afresh`: every group planned), side by side in one process;
prints JSON.

    .venv/bin/python bench/admission_rounds.py [--pods 1000 7500 20000] [--nodes 1213]
        [--rounds 30] [--out bench/results/NAME.json]

The cluster is round_harness.py's (bench/web_model.py's generated pool at rest: every lease
Active, every pod admitted and Running, twelve tenants' GpuQuotas, no cohort: thirteen groups
with the default tenant), in the controller's watch cache fed by hand and read through its own
adapter. The client takes the writes: a GpuQuota status it is sent is folded back into the
cache, as the watch would bring it, so from the second round on a round at rest writes nothing
(the JSON counts the writes of the measured rounds: 0 expected). Each round a random pod's
annotation changes, then each variant's reconciler runs a round (`groups_kept_per_round_median`:
the groups the kept variant did not plan again). Before those, the kept variant runs as many
rounds alone (`kept_alone`): in the side-by-side rounds the garbage the afresh variant leaves is
collected in some kept rounds too, which at 20,000 pods is most of their cost. Last, the same
pool held by one tenant (`one_tenant_kept`, kept rounds alone): its group changes with every
pod, so each round plans its whole queue and ledger, as in a one-tenant fill.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from typing import Any, cast

from round_harness import NOW, cluster, cpu_ms, fed_cache, main, side_by_side, touch
from web_model import Feeder

from gpupool.adapters.cluster import KubeClusterApi
from gpupool.controllers.admission.charge import BorrowedMarks, KeptCharges
from gpupool.controllers.admission.groups import GroupPlans
from gpupool.controllers.admission.reconcile import AdmissionReconciler
from gpupool.controllers.kept import Kept

VARIANTS = ("kept", "afresh")


class StatusClient:
    """Takes the admission round's writes: a GpuQuota status is folded into the cache."""

    def __init__(self, feeder: Feeder, quotas: dict[str, dict[str, Any]]) -> None:
        self.feeder = feeder
        self.quotas = quotas
        self.writes = 0

    async def patch(self, res: Any, name: str, obj: Any, **_: Any) -> None:
        self.writes += 1
        quota = self.quotas.get(name)
        if quota is not None and isinstance(obj, dict) and "status" in obj:
            quota["status"] = {**quota.get("status", {}), **obj["status"]}
            self.feeder.write("gpuquotas", quota)

    async def create(self, obj: Any, **_: Any) -> None:
        self.writes += 1


def one_tenant(objs: dict[str, list[dict[str, Any]]]) -> None:
    """The same pool held by its first tenant alone (one GpuQuota, large enough for all)."""
    first = objs["gpuquotas"][0]
    tenant = first["metadata"]["name"]
    for pod in objs["pods"]:
        pod["metadata"]["labels"]["gpupool.io/tenant"] = tenant
    for lease in objs["gpuleases"]:
        lease["spec"]["tenant"] = tenant
        lease["metadata"].setdefault("labels", {})["gpupool.io/tenant"] = tenant
    first["spec"]["nominal"] = "1000000Gi"
    objs["gpuquotas"] = [first]


async def one_tenant_rounds(nodes: int, pods: int, rounds: int, seed: int) -> list[float]:
    """CPU ms of each kept round owed one pod change when one tenant holds every pod: its group
    changes with every pod, so each round plans its whole queue and ledger."""
    objs = cluster(nodes, pods)
    one_tenant(objs)
    cache, feeder = fed_cache(objs)
    client = StatusClient(feeder, {q["metadata"]["name"]: q for q in objs["gpuquotas"]})
    loop = AdmissionReconciler(KubeClusterApi(cast(Any, client), cache=cache), lambda: NOW)
    await loop.reconcile()
    rng = random.Random(seed)
    took = []
    for i in range(rounds):
        touch(rng.choice(objs["pods"]), feeder, i)
        t0 = time.process_time()
        await loop.reconcile()
        took.append((time.process_time() - t0) * 1000)
    return took


def forget(loop: AdmissionReconciler) -> None:
    """Nothing kept from the last round: the next is made afresh, as before anything was kept."""
    loop._marks, loop._accounts, loop._charges = BorrowedMarks(), Kept(), KeptCharges()
    loop._groups = GroupPlans()


async def size(nodes: int, pods: int, rounds: int, seed: int) -> dict[str, Any]:
    objs = cluster(nodes, pods)
    cache, feeder = fed_cache(objs)
    client = StatusClient(feeder, {q["metadata"]["name"]: q for q in objs["gpuquotas"]})
    api = KubeClusterApi(cast(Any, client), cache=cache)
    loops = {way: AdmissionReconciler(api, lambda: NOW) for way in VARIANTS}
    afresh = loops["afresh"]  # nothing kept between rounds: what it keeps is new each round
    for loop in loops.values():
        await loop.reconcile()  # the first round writes the quotas' status
    client.writes = 0
    rng = random.Random(seed)
    # the kept variant alone first: in the side-by-side rounds below, the garbage the afresh
    # variant leaves is collected in some kept rounds too (at 20,000 pods, most of their cost)
    alone: list[float] = []
    for i in range(rounds):
        touch(rng.choice(objs["pods"]), feeder, i)
        t0 = time.process_time()
        await loops["kept"].reconcile()
        alone.append((time.process_time() - t0) * 1000)
    took: dict[str, list[float]] = {way: [] for way in VARIANTS}
    kept_groups: list[int] = []
    for i in range(rounds):
        for way in VARIANTS if i % 2 else reversed(VARIANTS):
            touch(rng.choice(objs["pods"]), feeder, i)
            if way == "afresh":
                forget(afresh)
            t0 = time.process_time()
            done = await loops[way].reconcile()
            took[way].append((time.process_time() - t0) * 1000)
            assert not done.plan.admit, "the pool is at rest: nothing to admit"
            if way == "kept":
                kept_groups.append(loops[way]._groups.kept_last_round)
    out: dict[str, Any] = {"pods": len(objs["pods"]), "rounds_each": rounds}
    out["kept_alone"] = cpu_ms(alone)
    out |= side_by_side(took, "afresh", "kept")
    out["writes_in_measured_rounds"] = client.writes
    out["groups_kept_per_round_median"] = statistics.median(kept_groups)
    gc.collect()
    out["one_tenant_kept"] = cpu_ms(await one_tenant_rounds(nodes, pods, rounds, seed))
    return out


if __name__ == "__main__":
    raise SystemExit(
        main(__doc__, "the admission round owed one pod change: what is kept vs afresh",
             "pods", 30, size)
    )  # fmt: skip
