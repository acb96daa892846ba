#!/usr/bin/env bash
# Builds the gpupool image from ./Dockerfile with buildah, on a Debian base made here with
# mmdebstrap (no container registry needed: only a Debian mirror and PyPI), and exports it as an
# OCI archive for `ctr -n k8s.io images import` (or `skopeo copy oci-archive:... docker://...`).
#
#   base   ~/.cache/gpupool/image/base-<recipe hash>.tar      mmdebstrap bookworm rootfs
#          localhost/gpupool-base:<recipe hash>               imported into buildah's storage
#   image  gpupool:<version>, label gpupool.io/source=<hash>  --build-arg BASE=<the base>
#   out    ~/.cache/gpupool/image/gpupool-<version>-<hash>.oci.tar
#
# <hash> covers every build input: the Dockerfile, .dockerignore, this script and the files the
# Dockerfile copies (pyproject.toml, README.md, src/, native/, as .dockerignore filters them).
# Idempotent: when the archive for the current inputs exists, it only prints its path.
# Prints the archive's path last. buildah's storage is private: <cache>/storage/{root,run}.
#
# Usage: tools/image/build.sh [--force]
# Env: GPUPOOL_IMAGE_CACHE (the cache folder), GPUPOOL_BUILD_CA (a CA bundle to mount read-only
# over the image's during the build, default the host's /etc/ssl/certs/ca-certificates.crt:
# where HTTPS goes through a proxy only the host trusts, pip in the build needs it; it is not
# saved into the image), DEBIAN_MIRROR (default http://deb.debian.org/debian).
# Needs: root, buildah (>= 1.28), mmdebstrap, and runc on hosts with hybrid cgroups (Debian:
# apt-get install buildah mmdebstrap runc).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
force=0
[[ "${1:-}" == "--force" ]] && force=1

for tool in buildah mmdebstrap; do
  command -v "$tool" >/dev/null || {
    echo "build.sh: $tool is not installed (Debian: apt-get install buildah mmdebstrap)" >&2; exit 1; }
done
[[ $(id -u) == 0 ]] || { echo "build.sh: run as root (mmdebstrap and buildah's overlay storage)" >&2; exit 1; }

cache="${GPUPOOL_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpupool/image}"
mkdir -p "$cache"
# One build at a time per cache folder (two worktrees building at once would share the storage).
exec 9>"$cache/.lock"
flock 9

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/pyproject.toml" | head -n1)"
[[ -n "$version" ]] || { echo "build.sh: no version in pyproject.toml" >&2; exit 1; }
image="gpupool:$version"
bah=(buildah --root "$cache/storage/root" --runroot "$cache/storage/run" --storage-driver overlay)

t0=$SECONDS
step() { echo "build.sh: $* ($((SECONDS - t0))s)" >&2; }

# ---- the base: a Debian rootfs with what the Dockerfile's stages use ---------------------------
suite=bookworm
packages=python3,python3-venv,python3-pip,ca-certificates
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
base_key="$(printf '%s\n' "$suite" "$packages" "$mirror" minbase | sha256sum | cut -c1-12)"
base="localhost/gpupool-base:$base_key"
if ! "${bah[@]}" inspect --type image "$base" >/dev/null 2>&1; then
  rootfs="$cache/base-$base_key.tar"
  if [[ ! -s "$rootfs" ]]; then
    step "mmdebstrap $suite ($packages)"
    # (mmdebstrap picks the output format by the name's extension: keep .tar last.)
    mmdebstrap --quiet --variant=minbase --include="$packages" "$suite" "$rootfs.part.tar" "$mirror"
    mv -f "$rootfs.part.tar" "$rootfs"
  fi
  step "importing the base as $base"
  ctr="$("${bah[@]}" from scratch)"
  "${bah[@]}" add "$ctr" "$rootfs" / >/dev/null
  "${bah[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd /bin/sh "$ctr"
  "${bah[@]}" commit --quiet --rm "$ctr" "$base" >/dev/null
fi

# ---- the inputs' hash: the same files the build context holds --------------------------------
inputs() {
  cd "$repo"
  printf '%s\n' Dockerfile .dockerignore pyproject.toml README.md tools/image/build.sh
  find src native -type f \
    -not -path 'native/build/*' -not -path '*/__pycache__/*' -not -name '*.pyc' \
    -not -path '*.egg-info/*'
}
source_hash="$(inputs | LC_ALL=C sort | (cd "$repo" && xargs sha256sum) | sha256sum | cut -c1-12)"
archive="$cache/gpupool-$version-$source_hash.oci.tar"

if [[ $force == 0 && -s "$archive" ]]; then
  echo "$archive"
  exit 0
fi

# ---- the image ------------------------------------------------------------------------------
ca="${GPUPOOL_BUILD_CA:-/etc/ssl/certs/ca-certificates.crt}"
mounts=()
[[ -r "$ca" ]] && mounts=(-v "$ca:/etc/ssl/certs/ca-certificates.crt:ro")
# runc where installed: crun 1.8 (buildah's default on Debian 12) refuses hybrid cgroup v1/v2 hosts.
runtime=()
command -v runc >/dev/null && runtime=(--runtime "$(command -v runc)")
step "building $image from $base (source $source_hash)"
# --network host: buildah's default bridge network would add iptables chains on the host.
# --layers: a change under src/ reuses the limiter stage.
"${bah[@]}" bud --quiet --layers --pull=never --network host "${runtime[@]}" "${mounts[@]}" \
  --build-arg "BASE=$base" --label "gpupool.io/source=$source_hash" \
  -t "$image" -f "$repo/Dockerfile" "$repo" >/dev/null

step "exporting $archive"
rm -f "$cache/gpupool-$version-"*.oci.tar  # one archive per version: the newest source
"${bah[@]}" push --quiet "$image" "oci-archive:$archive.part:$image"
mv -f "$archive.part" "$archive"
# The stages' layers stay in the storage (--layers reuses them on the next source change; a
# prune would drop them): delete the cache folder to reclaim the space.
step "done: $(du -m "$archive" | cut -f1) MiB archive"
echo "$archive"
