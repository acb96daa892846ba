"""The built-in demo: a small pool, four teams and a timeline, as data in the package
(`simulator/demo/`: scenario.yaml, tenants.yaml, timeline.yaml). `gpupool demo` plays it on the
dev cluster; `gpupool simulate replay --demo` replays the same tasks, quotas and times in the
simulator."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpupool.domain.devices import Node
from gpupool.domain.errors import InputFileError
from gpupool.domain.requests import Request
from gpupool.placement import ClusterSnapshot
from gpupool.quota.resource import Resource
from gpupool.simulator.openb import TracePod
from gpupool.simulator.scenario import load_scenario
from gpupool.simulator.tenancy import Tenancy
from gpupool.simulator.tenants_yaml import load_tenancy

DEMO_DIR = Path(__file__).parent / "demo"


@dataclass(frozen=True, slots=True)
class Step:
    at_s: float
    say: str
    start: tuple[Request, ...]


@dataclass(frozen=True, slots=True)
class Demo:
    name: str
    nodes: tuple[Node, ...]
    tenancy: Tenancy
    steps: tuple[Step, ...]
    end_s: float

    @property
    def requests(self) -> tuple[Request, ...]:
        return tuple(r for step in self.steps for r in step.start)


def pool_capacity(nodes: tuple[Node, ...] | list[Node]) -> dict[Resource, int]:
    """What the tenants' percentages are of: the pool's GPUs (milli) and GPU memory (bytes) as
    placement counts them."""
    snap = ClusterSnapshot.from_nodes(list(nodes))
    return {
        Resource.GPU: snap.total_gpu_milli(),
        Resource.GPU_MEMORY: int(snap.gmem_total[snap.present].sum()),
    }


def _steps(path: Path, data: Any, requests: dict[str, Request]) -> tuple[tuple[Step, ...], float]:
    if not isinstance(data, dict) or not isinstance(data.get("steps"), list):
        raise InputFileError(str(path), 1, "steps", "expected a mapping with a `steps:` list")
    steps = []
    for i, raw in enumerate(data["steps"]):
        if not isinstance(raw, dict) or not isinstance(raw.get("start"), list):
            raise InputFileError(str(path), 0, "steps", f"step {i + 1}: needs at and start: [...]")
        unknown = [n for n in raw["start"] if n not in requests]
        if unknown:
            raise InputFileError(
                str(path), 0, "start", f"step {i + 1}: no task named {', '.join(unknown)}"
            )
        steps.append(
            Step(
                float(raw.get("at", 0)),
                str(raw.get("say", "")),
                tuple(requests[n] for n in raw["start"]),
            )
        )
    return tuple(sorted(steps, key=lambda s: s.at_s)), float(data.get("end", 0))


def load_demo(folder: Path = DEMO_DIR) -> Demo:
    scenario = load_scenario(folder / "scenario.yaml")
    tenancy = load_tenancy(folder / "tenants.yaml", pool_capacity(scenario.nodes))
    path = folder / "timeline.yaml"
    steps, end = _steps(
        path, yaml.safe_load(path.read_text()), {r.name: r for r in scenario.requests}
    )
    return Demo(
        scenario.name, scenario.nodes, tenancy, steps, max(end, steps[-1].at_s if steps else 0)
    )


def demo_timeline(demo: Demo) -> list[TracePod]:
    """The demo as a trace for the replay: each task from its step's time to the end, its tenant
    as the QoS class the tenants file maps to that tenant."""
    return [
        TracePod(
            request=req,
            creation_time=step.at_s,
            deletion_time=demo.end_s,
            qos=req.tenant,
            phase="Succeeded",
        )
        for step in demo.steps
        for req in step.start
    ]
