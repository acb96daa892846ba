"""What the typed port's reads cost a controller round: `adapters.kubernetes.decoded.pods_listed`
(each pod through the memoised `read_pod`, plus its `ObjectReference`) and the loop's
`Containment.decode` over it, against the same memoised decoding as the reconcilers did it before
the port was typed (`read_pod` per object, paired with its JSON). The watch cache hands the same
objects every round, so the memo hits: what is left is the per-object bookkeeping. Prints JSON.

    .venv/bin/python bench/typed_reads.py [--pods 1000 10000] [--rounds 20]

Why: every loop reads its pods and leases each round; the reference made per object is the
typed port's new cost, and it must stay small beside the round's other work.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from gpupool.adapters.kubernetes.decoded import pods_listed, read_pod
from gpupool.controllers.contain import Containment
from gpupool.state.listed import ObjectReference


class _NoEvents:
    async def event(self, about: ObjectReference, reason: str, message: str, *,
                    warning: bool = False, now_rfc3339: str) -> None:  # fmt: skip
        pass


def pods(n: int) -> list[dict[str, Any]]:
    limits = {"gpupool.io/gpu-memory": "12Gi"}
    return [
        {
            "metadata": {
                "name": f"p{i}",
                "namespace": f"t{i % 20}",
                "uid": f"uid-{i}",
                "resourceVersion": str(1000 + i),
                "labels": {"gpupool.io/tenant": f"t{i % 20}"},
                "annotations": {"gpupool.io/queued-at": "2026-01-01T00:00:00Z"},
            },
            "spec": {
                "containers": [{"name": "c", "resources": {"limits": limits}}],
                "nodeName": f"n{i % 500}",
            },
            "status": {"phase": "Running"},
        }
        for i in range(n)
    ]


def before(objects: list[dict[str, Any]]) -> int:
    """The reconcilers' decoding before the typed port (Containment.decode with read_pod)."""
    out = []
    for obj in objects:
        try:
            value = read_pod(obj)
        except Exception:
            continue
        out.append((value, obj))
    return len(out)


def after(objects: list[dict[str, Any]], contain: Containment) -> int:
    return len(contain.decode("read", "Pod", pods_listed(objects), 0.0))


def timed(run: Any, rounds: int) -> tuple[float, float]:
    """(median, fastest) round in ms: the fastest is the least disturbed by a loaded machine."""
    took = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        took.append(time.perf_counter() - start)
    return round(statistics.median(took) * 1000, 3), round(min(took) * 1000, 3)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    contain = Containment("bench", _NoEvents())
    results = []
    for n in args.pods:
        objects = pods(n)
        before(objects)  # the memo warmed: every later round hits it, as over the watch cache
        old_ms = timed(lambda objs=objects: before(objs), args.rounds)
        typed_ms = timed(lambda objs=objects: after(objs, contain), args.rounds)
        results.append({"pods": n, "before_ms": old_ms, "typed_ms": typed_ms})
    print(json.dumps({"rounds": args.rounds, "per_round_median_min_ms": results}, indent=2))


if __name__ == "__main__":
    main()
