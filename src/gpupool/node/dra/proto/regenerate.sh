#!/usr/bin/env bash
# Regenerate the Python stubs for the kubelet's DRA plugin API (v1), its DRA device health API
# (v1alpha1) and plugin registration API (v1) from dra.proto, dra_health.proto and
# pluginregistration.proto, the way ../../device_plugin/proto does.
# Run from anywhere; uses the project's venv (grpcio-tools pinned in pyproject's dev extras).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../../../.." && pwd)"   # the repository root (src/ is below it)
python="${PYTHON:-$root/.venv/bin/python}"
cd "$root/src"
"$python" -m grpc_tools.protoc -I. \
  --python_out=. --pyi_out=. --grpc_python_out=. \
  gpupool/node/dra/proto/dra.proto gpupool/node/dra/proto/dra_health.proto \
  gpupool/node/dra/proto/pluginregistration.proto
echo "regenerated $(ls "$here"/*_pb2*.py*)"
