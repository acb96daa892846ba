"""How the suite splits across pytest-xdist workers (`make test` runs `pytest -n 2`): one work
unit per test file, so a file's module fixtures (a dev cluster of its own, a built chart) start
once; and one unit, `host`, for the files in HOST_FILES — those that use what the host has only
one of: the real node (containerd, the kubelet's fixed host folders, iptables rules), buildah's
image store — so they run one after another on one worker. Those files' tests carry the `host`
mark (`-m host` selects them); a file whose tests carry it but is missing from HOST_FILES stops
the collection.

The units are made by our own xdist scheduler (`pytest_xdist_make_scheduler`): xdist's
`--dist loadgroup` marks do not reach pytest 9's node ids, and the scheduler only sees ids."""

from __future__ import annotations

from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

HOST = "host"
HOST_FILES = frozenset(
    {
        "tests/e2e/test_real_node_e2e.py",
        "tests/e2e/test_real_node_dra_e2e.py",
        "tests/e2e/test_helm_real_node_e2e.py",
        "tests/image/test_image.py",
    }
)


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


class FileUnits(LoadScopeScheduling):
    """xdist's per-file scheduling, with every file of HOST_FILES in one unit, handed out in
    the collection's order (`_order`: the longest kinds first), not xdist's most-tests-first,
    which left the few long trace and e2e tests for the end."""

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        super().__init__(config, log)
        config.option.loadscopereorder = False

    def _split_scope(self, nodeid: str) -> str:
        path = _file(nodeid)
        return HOST if path in HOST_FILES else path


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> FileUnits:
    return FileUnits(config, log)


def _order(path: str) -> int:
    """Longest first, so that no long file starts last: the trace checks (minutes of CPU),
    the host unit, the e2e files (a dev cluster each), then the rest."""
    if path.startswith("tests/trace/"):
        return 0
    if path in HOST_FILES:
        return 1
    return 2 if path.startswith("tests/e2e/") else 3


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    stray = sorted({_file(i.nodeid) for i in items if i.get_closest_marker(HOST)} - HOST_FILES)
    if stray:
        raise pytest.UsageError(
            f"tests marked `host` must be listed in HOST_FILES (tests/conftest.py), or two "
            f"xdist workers may run them at once: {', '.join(stray)}"
        )
    items.sort(key=lambda item: _order(_file(item.nodeid)))  # stable within a kind
