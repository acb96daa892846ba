#!/usr/bin/env bash
# Regenerate the Python stubs for the kubelet device-plugin API (v1beta1) from api.proto.
# Run from anywhere; uses the project's venv (grpcio-tools pinned in pyproject's dev extras).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../../../.." && pwd)"   # the repository root (src/ is below it)
python="${PYTHON:-$root/.venv/bin/python}"
cd "$root/src"
"$python" -m grpc_tools.protoc -I. \
  --python_out=. --pyi_out=. --grpc_python_out=. \
  gpupool/node/device_plugin/proto/api.proto
echo "regenerated $(ls "$here"/api_pb2*.py*)"
