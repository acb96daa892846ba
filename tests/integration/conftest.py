"""Fixtures of the integration tests (real gRPC on unix sockets)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.kubelet import short_socket_dir


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory whose unix socket paths stay under the ~107-byte limit (see short_socket_dir)."""
    with short_socket_dir("gp-it-") as path:
        yield path
