#!/usr/bin/env bash
# Builds the two images the real node runs, as archives `ctr images import` loads (no registry
# is reachable here, so nothing is pulled):
#   pause.tar      gpupool.dev/pause:local      the pod sandbox (a static C program)
#   gpu-probe.tar  gpupool.dev/gpu-probe:local  gpu_probe.c and the C libraries it needs; it
#                  prints what CUDA and NVML report (tests/e2e/test_real_node_e2e.py reads it)
# into $GPUPOOL_REALNODE_IMAGES or ~/.cache/gpupool/real-node/images (prints that folder last).
# Needs: gcc and a static libc (libc6-dev), native/build (make native), python3.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="${GPUPOOL_REALNODE_IMAGES:-${XDG_CACHE_HOME:-$HOME/.cache}/gpupool/real-node/images}"
fake="$repo/native/build/fake"
[[ -f "$fake/libcuda.so.1" ]] || { echo "build-images.sh: run make native first" >&2; exit 1; }
pack="$repo/src/gpupool/devcluster/realnode/image_archive.py"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

cc -O2 -Wall -Wextra -Werror -static -o "$work/pause" "$here/pause.c"
python3 "$pack" "$out/pause.tar" gpupool.dev/pause:local --entrypoint /pause "$work/pause=/pause"

# The probe links the fake libcuda only to name libcuda.so.1; in the container the runtime
# mounts the driver (tools/realnode: the fake toolkit), so the image does not carry one.
cc -O2 -Wall -Wextra -Werror -I"$repo/native/include" -o "$work/gpu_probe" "$here/gpu_probe.c" \
  -L"$fake" -lcuda -ldl
# The C libraries of the probe, the limiter and the fake driver (what `ldd` resolves).
libs=()
while read -r lib; do
  libs+=("$lib=$lib")
done < <(ldd "$work/gpu_probe" "$repo/native/build/libgpupool.so" "$fake/libcuda.so.1" \
  "$fake/libnvidia-ml.so.1" | awk '$2 == "=>" && $3 ~ /^\// {print $3} NF == 2 && $1 ~ /^\// {print $1}' |
  grep -v -e 'libcuda' -e 'libnvidia-ml' | sort -u)
# 80 GiB: the card the dev cluster's agent fakes (A100-80GB); the limiter must show the slice.
python3 "$pack" "$out/gpu-probe.tar" gpupool.dev/gpu-probe:local --entrypoint /gpu_probe \
  --env FAKE_CUDA_TOTAL_MEM=85899345920 --env PATH=/ --dir /tmp \
  "$work/gpu_probe=/gpu_probe" "${libs[@]}"
echo "$out"
