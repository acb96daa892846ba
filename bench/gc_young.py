"""`gpupool` with the daemons' young-generation GC threshold set to another value (benchmark-only:
a benchmark that starts a daemon runs it at the setting it compares; the daemons themselves
always use `cli.daemon.GC_YOUNG_THRESHOLD`).

    .venv/bin/python bench/gc_young.py 700 extender --kubeconfig ... (any gpupool command line)
"""

from __future__ import annotations

import sys

from gpupool.cli import daemon
from gpupool.cli.main import main

if __name__ == "__main__":
    if len(sys.argv) < 3 or not sys.argv[1].isdigit():
        raise SystemExit("usage: gc_young.py THRESHOLD GPUPOOL-COMMAND [ARGS...]")
    daemon.GC_YOUNG_THRESHOLD = int(sys.argv[1])
    raise SystemExit(main(sys.argv[2:]))
