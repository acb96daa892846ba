"""The placement policies' names, in the order `--policy all` runs them; light, so that the
command line can offer them without importing the policies (`policies.POLICIES` has the same
keys in the same order: tests/unit/cli/test_cli_startup.py)."""

from __future__ import annotations

POLICY_NAMES = (
    "random",
    "binpack",
    "spread",
    "best-fit",
    "dot-product",
    "gpu-packing",
    "gpu-clustering",
    "fgd",
    "gpupool",
)
