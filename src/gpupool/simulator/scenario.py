"""gpupool's own YAML scenario format: a cluster and a workload in one file.

    cluster:
      - name: a100          # node names become a100-0, a100-1, ...
        count: 16
        cpu: 96             # cores, or milli-cores as "96000m"
        memory: 1Ti         # host memory
        gpus: 8xA100-80GB
        nvlink: true        # all cards of a node in one NVLink domain
        numa: 2             # NUMA nodes the cards are split across
    workload:
      - name: chat-7b
        count: 300          # how many such tasks the workload holds
        cpu: 4
        memory: 32Gi
        gpu-memory: 16Gi    # a slice of one card ...
        gpu-compute: 25     # ... capped at 25% of its SMs
        gpu-model: A100-80GB|H800
      - name: train-8x
        count: 12
        cpu: 64
        memory: 512Gi
        gpus: 8             # whole cards
      - name: notebook
        count: 40
        cpu: 2
        gpu-share: 250      # a quarter of a card, as the Alibaba trace writes it

Keys are checked; an unknown key or a bad value is reported with file, line and key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from gpupool.domain.devices import Node, uniform_node
from gpupool.domain.errors import GpupoolError, InputFileError
from gpupool.domain.models import parse_gpu_list, parse_model_list
from gpupool.domain.requests import Request
from gpupool.domain.units import MiB, parse_bytes

T = TypeVar("T")
NODE_KEYS = {"name", "count", "cpu", "memory", "gpus", "nvlink", "numa"}
TASK_KEYS = {
    "name",
    "count",
    "cpu",
    "memory",
    "gpus",
    "gpu-memory",
    "gpu-compute",
    "gpu-share",
    "gpu-model",
    "prefer-gpu-model",
    "avoid-gpu-model",
    "exclusive",
    "tenant",
    "priority",
}


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    nodes: tuple[Node, ...]
    requests: tuple[Request, ...]


class _LineLoader(yaml.SafeLoader):
    """Records the line of every mapping under the key `__line__`."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    mapping = loader.construct_mapping(node, deep=True)
    mapping["__line__"] = node.start_mark.line + 1
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_cpu(value: object) -> int:
    """Cores (`4`, `0.5`) or milli-cores (`500m`) to milli-cores."""
    text = str(value).strip()
    milli = int(text[:-1]) if text.endswith("m") else round(float(text) * 1000)
    if milli < 0:
        raise ValueError(text)
    return milli


def parse_gpu_spec(text: str) -> tuple[int, str]:
    """`8xA100-80GB` → (8, 'A100-80GB'): one model per node entry."""
    parts = parse_gpu_list(text)
    if len(parts) != 1:
        raise ValueError(f"one model per node entry; got {text!r}")
    count, model = parts[0]
    return count, model.name


class _Entry:
    def __init__(self, path: Path, entry: Mapping[str, Any], allowed: set[str], what: str) -> None:
        self.path, self.entry = path, entry
        self.line = int(entry.get("__line__", 0))
        unknown = sorted(set(entry) - allowed - {"__line__"})
        if unknown:
            raise InputFileError(
                str(path),
                self.line,
                unknown[0],
                f"unknown key in {what}; allowed: {', '.join(sorted(allowed))}",
            )

    def get(self, key: str, parse: Callable[[Any], T], default: T) -> T:
        if key not in self.entry:
            return default
        value = self.entry[key]
        try:
            return parse(value)
        except (ValueError, TypeError, GpupoolError) as exc:
            problem = str(exc) if isinstance(exc, GpupoolError) else f"invalid value {value!r}"
            raise InputFileError(str(self.path), self.line, key, problem) from exc


def _positive_int(value: object) -> int:
    number = int(str(value))
    if number <= 0:
        raise ValueError(value)
    return number


def load_scenario(path: str | Path) -> Scenario:
    path = Path(path)
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_LineLoader)
    except OSError as exc:
        raise InputFileError(str(path), 0, None, f"cannot read file: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 0
        column = mark.column + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or exc
        raise InputFileError(str(path), line, column, f"not valid YAML: {problem}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("cluster"), list):
        raise InputFileError(str(path), 1, "cluster", "expected a top-level list `cluster:`")
    if not isinstance(data.get("workload"), list):
        raise InputFileError(str(path), 1, "workload", "expected a top-level list `workload:`")
    return Scenario(
        name=str(data.get("name", path.stem)),
        nodes=tuple(_nodes(path, data["cluster"])),
        requests=tuple(_requests(path, data["workload"])),
    )


def _nodes(path: Path, entries: list[Any]) -> list[Node]:
    nodes: list[Node] = []
    for raw in entries:
        if not isinstance(raw, dict):
            raise InputFileError(str(path), 0, "cluster", "each cluster entry must be a mapping")
        e = _Entry(path, raw, NODE_KEYS, "a cluster entry")
        name = e.get("name", str, f"node{len(nodes)}")
        gpus, model = e.get("gpus", parse_gpu_spec, (0, "T4"))
        for i in range(e.get("count", _positive_int, 1)):
            nodes.append(
                uniform_node(
                    f"{name}-{i}",
                    cpu_milli=e.get("cpu", parse_cpu, 0),
                    memory_mib=e.get("memory", lambda v: parse_bytes(v, what="memory"), 0) // MiB,
                    gpu_count=gpus,
                    model=model,
                    nvlink=e.get("nvlink", bool, False),
                    numa_nodes=e.get("numa", _positive_int, 1),
                )
            )
    return nodes


def _requests(path: Path, entries: list[Any]) -> list[Request]:
    requests: list[Request] = []
    for raw in entries:
        if not isinstance(raw, dict):
            raise InputFileError(str(path), 0, "workload", "each workload entry must be a mapping")
        e = _Entry(path, raw, TASK_KEYS, "a workload entry")
        name = e.get("name", str, f"task{len(requests)}")
        memory = e.get("gpu-memory", lambda v: parse_bytes(v, what="gpu-memory"), 0)
        share = e.get("gpu-share", int, 0)
        gpus = e.get("gpus", int, 1 if (memory or share) else 0)
        try:
            template = Request(
                name=name,
                cpu_milli=e.get("cpu", parse_cpu, 0),
                memory_mib=e.get("memory", lambda v: parse_bytes(v, what="memory"), 0) // MiB,
                gpu_count=gpus,
                gpu_milli=share or None,
                gpu_memory_bytes=memory or None,
                compute_pct=e.get("gpu-compute", int, 0) or None,
                models=e.get("gpu-model", parse_model_list, ()),
                preferred_models=e.get("prefer-gpu-model", parse_model_list, ()),
                avoided_models=e.get("avoid-gpu-model", parse_model_list, ()),
                exclusive=e.get("exclusive", bool, False),
                tenant=e.get("tenant", str, "default"),
                priority=e.get("priority", int, 0),
            )
        except GpupoolError as exc:
            raise InputFileError(str(path), e.line, None, str(exc)) from exc
        count = e.get("count", _positive_int, 1)
        requests.extend(
            template if count == 1 else _named(template, f"{name}-{i}") for i in range(count)
        )
    return requests


def _named(req: Request, name: str) -> Request:
    from dataclasses import replace

    return replace(req, name=name)
