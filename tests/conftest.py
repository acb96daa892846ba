"""How the suite splits across pytest-xdist workers (`make test` runs `pytest -n 2`): one work
unit per test file, so a file's module fixtures (a dev cluster of its own, a built chart) start
once; and one unit, `host`, for the files in HOST_FILES — those that use what the host has only
one of: the real node (containerd, the kubelet's fixed host folders, iptables rules), buildah's
image store — so they run one after another on one worker, and first, since they are the
longest. Those files' tests carry the `host` mark (`-m host` selects them); a file whose tests
carry it but is missing from HOST_FILES stops the collection.

The units are made by our own xdist scheduler (`pytest_xdist_make_scheduler`): xdist's
`--dist loadgroup` marks do not reach pytest 9's node ids, and the scheduler only sees ids."""

from __future__ import annotations

import pytest
from xdist.scheduler import LoadScopeScheduling

HOST = "host"
HOST_FILES = frozenset(
    {
        "tests/e2e/test_real_node_e2e.py",
        "tests/e2e/test_helm_real_node_e2e.py",
        "tests/image/test_image.py",
    }
)


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


class FileUnits(LoadScopeScheduling):
    """xdist's per-file scheduling, with every file of HOST_FILES in one unit."""

    def _split_scope(self, nodeid: str) -> str:
        path = _file(nodeid)
        return HOST if path in HOST_FILES else path


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> FileUnits:
    return FileUnits(config, log)  # type: ignore[arg-type]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    stray = sorted({_file(i.nodeid) for i in items if i.get_closest_marker(HOST)} - HOST_FILES)
    if stray:
        raise pytest.UsageError(
            f"tests marked `host` must be listed in HOST_FILES (tests/conftest.py), or two "
            f"xdist workers may run them at once: {', '.join(stray)}"
        )
    items.sort(key=lambda item: _file(item.nodeid) not in HOST_FILES)  # stable otherwise
