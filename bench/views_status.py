"""The cost of one `gpupool status` refresh on a large pool, the cluster read left out; prints JSON.

    .venv/bin/python bench/views_status.py [--nodes 1000] [--repeat 5]

Builds the views (ClusterCache rebuild, pool map, fragmentation, leases, queue, tenants) from
decoded values of a generated pool (tests/unit/views/pool_fixture.py's `big_pool`: 8 cards a
node, about a third of the cards holding one to three slices), then renders the summary text and
the `-o json` document. Reports the median milliseconds of each step and the bytes of each output.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit" / "views"))

from pool_fixture import NOW, big_pool

from gpupool.adapters import views_json
from gpupool.cli import views_text
from gpupool.state.views.status import build_status


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    inputs = big_pool(args.nodes)
    build, text_ms, json_ms = [], [], []
    text = doc = ""
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        view = build_status(inputs, NOW)
        t1 = time.perf_counter()
        text = views_text.render_status(view)
        t2 = time.perf_counter()
        doc = views_json.status_json(view, None, None)
        t3 = time.perf_counter()
        build.append((t1 - t0) * 1000)
        text_ms.append((t2 - t1) * 1000)
        json_ms.append((t3 - t2) * 1000)
    result = {
        "nodes": args.nodes,
        "cards": args.nodes * 8,
        "leases": len(inputs.leases),
        "repeat": args.repeat,
        "build_ms": round(statistics.median(build), 1),
        "text_ms": round(statistics.median(text_ms), 1),
        "json_ms": round(statistics.median(json_ms), 1),
        "text_bytes": len(text.encode()),
        "json_bytes": len(doc.encode()),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
