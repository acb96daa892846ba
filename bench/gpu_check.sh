#!/usr/bin/env bash
# One-go real-GPU check of libgpupool, prepared for a lent GPU machine (an H200 in this project).
# Builds the limiter, then runs bench/gpu_check.py, which prints one JSON object:
#   - the fake-driver test program gp_drive against the real libcuda/NVML (every allocation path
#     capped, cuMemGetInfo/cuDeviceTotalMem/NVML report the slice, VMM memory charged until it is
#     released and unmapped, a default pool charged to its device, SIGKILL reclaim, a control run),
#   - PyTorch under the limiter: torch.cuda.mem_get_info shows the slice, allocating past it
#     raises torch.cuda.OutOfMemoryError (caching allocator, cudaMallocAsync, expandable segments),
#   - the limiter's overhead, with and without LD_PRELOAD: allocation-heavy loop, bf16 matmul loop,
#     raw cuMemAlloc/cuMemFree pairs.
# Skips cleanly (status "skipped", exit 0) without a GPU, and skips the PyTorch parts without torch.
# tests/native/test_gpu_check_dry_run.py runs the driver part against the fake driver, so the
# steps this script asks of gp_drive stay the ones gp_drive knows.
#
#   bench/gpu_check.sh [--slice 8Gi] [--reps 3] [--skip-bench]
#   PYTHON=/path/to/python-with-torch bench/gpu_check.sh
# With OUT set (the device tool's output folder) the JSON is also written to $OUT/gpu_check.json.
# Expected run time on an H200: about two to four minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

skip() {
  printf '{"check": "libgpupool on a real GPU", "status": "skipped", "reason": "%s"}\n' "$1"
  exit 0
}

command -v "$PY" >/dev/null 2>&1 || skip "no Python interpreter ($PY)"
{ command -v make && command -v cc; } >/dev/null 2>&1 || skip "make and cc are needed to build the limiter"

log=$(mktemp)
if ! make -s -C native all test-bins >"$log" 2>&1; then
  cat "$log" >&2
  printf '{"check": "libgpupool on a real GPU", "status": "failed", "reason": "build failed (see stderr)"}\n'
  exit 1
fi
rm -f "$log"

args=("$@")
if [ -n "${OUT:-}" ]; then
  args+=(--out "$OUT/gpu_check.json")
fi
exec "$PY" bench/gpu_check.py ${args[@]+"${args[@]}"}
