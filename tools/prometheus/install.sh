#!/usr/bin/env bash
# promtool and prometheus (Debian's `prometheus` package) for the alert-rule and dashboard tests
# and the metrics e2e; a no-op when both are on PATH. Needs root and apt; elsewhere it says so and
# those tests skip with that reason.
set -euo pipefail
if command -v promtool >/dev/null && command -v prometheus >/dev/null; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "tools/prometheus/install.sh: promtool not found and cannot install it here (needs root and apt-get)" >&2
  exit 1
fi
flock /tmp/apt.lock apt-get install -y --no-install-recommends prometheus >/dev/null
