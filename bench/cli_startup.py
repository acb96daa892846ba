"""Start-up time of the `gpupool` command; prints JSON.

    python bench/cli_startup.py [--runs 15]

Runs `gpupool --help`, `gpupool simulate --help` and `python -c pass` (the interpreter's own
floor) `--runs` times each in fresh processes, one after the other, and reports wall-clock
median and minimum and the child's CPU seconds (user + system, from os.wait4: less sensitive
to other load on the machine than the wall clock). Target (issue 13): under 0.3 s. The import
profile behind it: `python -X importtime -m gpupool.cli.main simulate --help`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

TARGET_S = 0.3
CASES = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "gpupool --help": [sys.executable, "-m", "gpupool.cli.main", "--help"],
    "gpupool simulate --help": [sys.executable, "-m", "gpupool.cli.main", "simulate", "--help"],
}


def once(argv: list[str]) -> tuple[float, float]:
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    results = {}
    for name, argv in CASES.items():
        once(argv)  # warm the page cache
        walls, cpus = zip(*(once(argv) for _ in range(args.runs)), strict=True)
        results[name] = {
            "wall_median_s": round(statistics.median(walls), 3),
            "wall_min_s": round(min(walls), 3),
            "cpu_median_s": round(statistics.median(cpus), 3),
            "target_s": None if name.startswith("python") else TARGET_S,
        }
    print(
        json.dumps(
            {
                "bench": "cli-startup",
                "runs": args.runs,
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "load_average": [round(x, 2) for x in os.getloadavg()],
                "results": results,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
