#!/usr/bin/env bash
# Host setup for `gpupool dev-cluster up --real-node` (Debian, as root): installs what is missing
# of runc, the CNI plugins, iptables and a static libc, and of buildah and mmdebstrap
# (tools/image/build.sh, which the chart-on-a-real-node e2e test runs), then builds containerd v2
# (build-containerd.sh: Debian 12's containerd 1.6 cannot inject CDI devices) and the node's
# images (build-images.sh). Idempotent: installs and builds nothing when all is there. Other
# sessions on the same machine may install packages too: apt runs under `flock /tmp/apt.lock`.
# Not root, or not Debian/apt: says so and exits 1 (the real-node tests then skip, saying why).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
need=()
command -v runc >/dev/null || need+=(runc)
[[ -x /usr/lib/cni/bridge || -x /opt/cni/bin/bridge ]] || need+=(containernetworking-plugins)
command -v iptables >/dev/null || need+=(iptables)
[[ -f /usr/lib/x86_64-linux-gnu/libc.a ]] || need+=(libc6-dev)
command -v cc >/dev/null || need+=(gcc)
command -v buildah >/dev/null || need+=(buildah)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)

if [[ ${#need[@]} -gt 0 ]]; then
  if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
    echo "setup.sh: missing ${need[*]}; install them as root with apt-get (Debian 12)" >&2
    exit 1
  fi
  echo "setup.sh: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  if ! flock /tmp/apt.lock apt-get install -y --no-install-recommends "${need[@]}" >&2; then
    flock /tmp/apt.lock apt-get update >&2
    flock /tmp/apt.lock apt-get install -y --no-install-recommends "${need[@]}" >&2
  fi
fi
"$here/build-containerd.sh" >/dev/null
"$here/build-images.sh"
