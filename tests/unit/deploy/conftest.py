"""The helm binary for the chart's tests, built by tools/helm/build.sh (a no-op once built)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[3]


def _render_module() -> ModuleType:
    path = REPO / "tools" / "helm" / "render_manifests.py"
    spec = importlib.util.spec_from_file_location("render_manifests", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def render() -> ModuleType:
    """tools/helm/render_manifests.py, the one place that knows how deploy/ is rendered."""
    return _render_module()


@pytest.fixture(scope="session")
def helm(render: ModuleType) -> Path:
    try:
        path: Path = render.helm_binary()
    except RuntimeError as exc:  # no go, no module proxy: nothing here can check the chart
        pytest.skip(f"helm cannot be built here: {exc}")
    return path
