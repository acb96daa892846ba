"""The Alibaba trace lives beside the checkout in ../shared; these tests skip without it."""

from __future__ import annotations

from pathlib import Path

import pytest

TRACE = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "alibaba-gpu-v2023"


@pytest.fixture(scope="session")
def trace_dir() -> Path:
    if not (TRACE / "openb_node_list_gpu_node.csv").exists():
        pytest.skip(f"the Alibaba trace is not at {TRACE}")
    return TRACE
