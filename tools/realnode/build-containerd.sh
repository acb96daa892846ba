#!/usr/bin/env bash
# Builds the real node's container runtime, containerd v2 (containerd, containerd-shim-runc-v2,
# ctr) from github.com/containerd/containerd/v2 (wrapper module ./containerd), the way
# tools/k8s/build.sh builds the control plane: into a folder named after the version,
# ~/.cache/gpupool/containerd/<version>/bin (or $GPUPOOL_CONTAINERD_BIN). Debian 12's containerd
# 1.6.20 has no CDI device injection, which a DRA driver's devices reach containers through;
# v2 always has it. Statically linked (CGO off, as containerd's own Makefile builds the shim):
# no btrfs snapshotter, which the real node does not use (overlayfs).
# Idempotent: builds only what is missing; --force rebuilds all. Prints the bin folder last.
# The version is read from the wrapper module's go.mod; src/gpupool/devcluster/realnode/host.py
# names the same folder (a unit test keeps the two in step).
#
# Usage: tools/realnode/build-containerd.sh [--force]
# Needs: go >= 1.26.6 (containerd v2.4's go.mod) and the Go module proxy (or a filled cache).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../go-build-env.sh
source "$here/../go-build-env.sh"
force=0
[[ "${1:-}" == "--force" ]] && force=1
need_go 1.26.6

version="$(modver "$here/containerd/go.mod" github.com/containerd/containerd/v2)"
[[ "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "build-containerd.sh: cannot read the version from containerd/go.mod" >&2; exit 1; }
tag="containerd-$version"
bin="${GPUPOOL_CONTAINERD_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/gpupool/containerd/$tag/bin}"
commands=(containerd containerd-shim-runc-v2 ctr)

missing=()
for c in "${commands[@]}"; do
  if [[ $force == 1 || ! -x "$bin/$c" || "$(cat "$bin/.built" 2>/dev/null)" != "$tag" ]]; then
    missing+=("$c")
  fi
done
if [[ ${#missing[@]} == 0 ]]; then
  echo "$bin"
  exit 0
fi

go_build_env "$bin"
t0=$SECONDS
p=github.com/containerd/containerd/v2
ldflags="-s -w -X $p/version.Version=${version#v} -X $p/version.Revision=module-$version"
ldflags+=" -X $p/version.Package=$p"
for c in "${missing[@]}"; do
  tags=urfave_cli_no_docs
  # containerd's Makefile: the shim speaks ttrpc only.
  [[ $c == containerd-shim-runc-v2 ]] && tags+=",no_grpc"
  echo "build-containerd.sh: $c $version ($((SECONDS - t0))s)" >&2
  (cd "$here/containerd" && CGO_ENABLED=0 go build -p "$jobs" -trimpath -tags "$tags" \
    -ldflags "$ldflags" -o "$staging/$c" "$p/cmd/$c")
done
for c in "${missing[@]}"; do mv -f "$staging/$c" "$bin/$c"; done
echo "$tag" > "$bin/.built"
echo "build-containerd.sh: done ($((SECONDS - t0))s)" >&2
echo "$bin"
