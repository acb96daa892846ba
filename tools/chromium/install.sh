#!/usr/bin/env bash
# Debian's `chromium`, run headless by the web view's browser test (tests/e2e/test_web_browser_e2e.py);
# a no-op when it is on PATH. Needs root and apt; elsewhere it says so and that test skips with
# that reason.
set -euo pipefail
if command -v chromium >/dev/null; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "tools/chromium/install.sh: chromium not found and cannot install it here (needs root and apt-get)" >&2
  exit 1
fi
flock /tmp/apt.lock apt-get install -y --no-install-recommends chromium >/dev/null
