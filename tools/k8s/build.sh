#!/usr/bin/env bash
# Builds the real control plane gpupool's dev cluster and e2e tests run:
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kubelet
#                                            (k8s.io/kubernetes, wrapper module ./kubernetes)
#   etcd                                     (go.etcd.io/etcd/server/v3, wrapper module ./etcd)
#   kwok                                     (sigs.k8s.io/kwok/cmd/kwok, wrapper module ./kwok)
# into a folder named after the versions, ~/.cache/gpupool/k8s/<versions>/bin (or $GPUPOOL_K8S_BIN).
# Idempotent: builds only the binaries that are missing (a folder filled by an older build.sh
# that knew fewer binaries gains just the new ones); --force rebuilds all. Prints the bin folder
# last.
# The versions are read from the wrapper modules' go.mod; src/gpupool/devcluster/binaries.py
# names the same folder (a unit test keeps the two in step).
#
# Usage: tools/k8s/build.sh [--force]
# Needs: go >= 1.26 and the Go module proxy (or a filled module cache).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../go-build-env.sh
source "$here/../go-build-env.sh"
force=0
[[ "${1:-}" == "--force" ]] && force=1
need_go 1.26

kube_version="$(modver "$here/kubernetes/go.mod" k8s.io/kubernetes)"
etcd_version="$(modver "$here/etcd/go.mod" go.etcd.io/etcd/server/v3)"
kwok_version="$(modver "$here/kwok/go.mod" sigs.k8s.io/kwok)"
for v in "$kube_version" "$etcd_version" "$kwok_version"; do
  [[ "$v" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "build.sh: cannot read versions from go.mod files" >&2; exit 1; }
done

tag="kubernetes-${kube_version}_etcd-${etcd_version}_kwok-${kwok_version}"
bin="${GPUPOOL_K8S_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/gpupool/k8s/$tag/bin}"
kube_commands=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet)
binaries=("${kube_commands[@]}" etcd kwok)

# The folder is named after the versions, so a binary in it is the right one; .built marks a
# folder whose earlier build finished (an interrupted one leaves only .staging.* behind).
missing=()
for b in "${binaries[@]}"; do
  if [[ $force == 1 || ! -x "$bin/$b" || "$(cat "$bin/.built" 2>/dev/null)" != "$tag" ]]; then
    missing+=("$b")
  fi
done
if [[ ${#missing[@]} == 0 ]]; then
  echo "$bin"
  exit 0
fi
wanted() { local b; for b in "${missing[@]}"; do [[ "$b" == "$1" ]] && return 0; done; return 1; }

go_build_env "$bin"

t0=$SECONDS
step() { echo "build.sh: $* ($((SECONDS - t0))s)" >&2; }

major="${kube_version#v}"; major="${major%%.*}"
minor="${kube_version#v*.}"; minor="${minor%%.*}"
v=k8s.io/component-base/version
kube_ldflags="-s -w -X $v.gitVersion=$kube_version -X $v.gitMajor=$major -X $v.gitMinor=$minor"
kube_ldflags+=" -X $v.gitTreeState=clean -X $v.buildDate=1970-01-01T00:00:00Z"
# kubectl reports its version through the same package; client-go has a copy of it too.
kube_ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$kube_version"
kube_ldflags+=" -X k8s.io/client-go/pkg/version.gitMajor=$major -X k8s.io/client-go/pkg/version.gitMinor=$minor"

if wanted kwok; then
  step "kwok $kwok_version"
  (cd "$here/kwok" && go build -p "$jobs" -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${kwok_version#v}" \
    -o "$staging/kwok" sigs.k8s.io/kwok/cmd/kwok)
fi

if wanted etcd; then
  step "etcd $etcd_version"
  # etcd's version is a constant in go.etcd.io/etcd/api/v3/version; only the commit is a variable.
  (cd "$here/etcd" && go build -p "$jobs" -trimpath \
    -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-$etcd_version" \
    -o "$staging/etcd" go.etcd.io/etcd/server/v3)
fi

for cmd in "${kube_commands[@]}"; do
  wanted "$cmd" || continue
  step "$cmd $kube_version"
  (cd "$here/kubernetes" && CGO_ENABLED=0 go build -p "$jobs" -trimpath -ldflags "$kube_ldflags" \
    -o "$staging/$cmd" "k8s.io/kubernetes/cmd/$cmd")
done

# Each binary lands whole (mv within one folder), so a reader never sees half a file.
for b in "${missing[@]}"; do mv -f "$staging/$b" "$bin/$b"; done
echo "$tag" > "$bin/.built"
step "done"
echo "$bin"
