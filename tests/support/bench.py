"""Load a script of bench/ as a module, as the benchmarks import one another: bench/ on the path,
the module registered under its own name (dataclasses and sibling imports look it up there), and
loaded once per process."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def bench_module(name: str) -> ModuleType:
    """bench/`name`.py, loaded on first use."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    loaded = sys.modules.get(name)
    if loaded is not None:
        return loaded
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
