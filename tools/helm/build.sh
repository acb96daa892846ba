#!/usr/bin/env bash
# Builds helm (helm.sh/helm/v3/cmd/helm, wrapper module ./helm) the way tools/k8s/build.sh builds
# the control plane: into a folder named after the version, ~/.cache/gpupool/helm/<version>/bin
# (or $GPUPOOL_HELM_BIN). The tests lint, render and install deploy/helm/gpupool with it.
# Idempotent: does nothing when the binary is already there. Prints the binary's path last.
# The version is read from the wrapper module's go.mod; src/gpupool/... does not name it: the
# tests find the binary by running this script.
#
# Usage: tools/helm/build.sh [--force]
# Needs: go >= 1.26 (helm v3.22's go.mod) and the Go module proxy (or a filled module cache).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../go-build-env.sh
source "$here/../go-build-env.sh"
force=0
[[ "${1:-}" == "--force" ]] && force=1
need_go 1.26

helm_version="$(modver "$here/helm/go.mod" helm.sh/helm/v3)"
client_version="$(modver "$here/helm/go.mod" k8s.io/client-go)"
for v in "$helm_version" "$client_version"; do
  [[ "$v" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "build.sh: cannot read versions from helm/go.mod" >&2; exit 1; }
done

tag="helm-${helm_version}"
bin="${GPUPOOL_HELM_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/gpupool/helm/$tag/bin}"

if [[ $force == 0 && -x "$bin/helm" && "$(cat "$bin/.built" 2>/dev/null)" == "$tag" ]]; then
  echo "$bin/helm"
  exit 0
fi

go_build_env "$bin"
t0=$SECONDS

# helm's own Makefile sets these: its version, and the Kubernetes version `helm lint` and
# `helm template` assume (.Capabilities.KubeVersion) — client-go v0.N is Kubernetes 1.N.
minor="${client_version#v0.}"; minor="${minor%%.*}"
v=helm.sh/helm/v3
ldflags="-s -w -X $v/internal/version.version=$helm_version -X $v/internal/version.gitTreeState=clean"
ldflags+=" -X $v/internal/version.gitCommit=module-$helm_version"
ldflags+=" -X $v/pkg/lint/rules.k8sVersionMajor=1 -X $v/pkg/lint/rules.k8sVersionMinor=$minor"
ldflags+=" -X $v/pkg/chartutil.k8sVersionMajor=1 -X $v/pkg/chartutil.k8sVersionMinor=$minor"

echo "build.sh: helm $helm_version" >&2
(cd "$here/helm" && CGO_ENABLED=0 go build -p "$jobs" -trimpath -ldflags "$ldflags" \
  -o "$staging/helm" helm.sh/helm/v3/cmd/helm)
mv -f "$staging/helm" "$bin/helm"
echo "$tag" > "$bin/.built"
echo "build.sh: done ($((SECONDS - t0))s)" >&2
echo "$bin/helm"
