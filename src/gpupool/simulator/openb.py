"""Loader for the Alibaba `openb` trace format (cluster-trace-gpu-v2023).

Node lists: `sn,cpu_milli,memory_mib,gpu,model`. Pod lists: `name,cpu_milli,memory_mib,num_gpu,
gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time`, where every column
after `gpu_milli` may be missing (some published variants carry only the first five).
Every problem is reported with the file, line and column.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from gpupool.domain.devices import Node, uniform_node
from gpupool.domain.errors import GpupoolError, InputFileError
from gpupool.domain.models import parse_model_list
from gpupool.domain.requests import MILLI, Request

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
POD_OPTIONAL = ("gpu_spec", "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class TracePod:
    request: Request
    creation_time: float = 0.0
    deletion_time: float | None = None
    scheduled_time: float | None = None
    qos: str = ""
    phase: str = ""


class _Rows:
    """CSV rows with the header checked and a helper that parses one cell with its location."""

    def __init__(self, path: Path, required: tuple[str, ...]) -> None:
        self.path = path
        self.required = required

    def __iter__(self) -> Iterator[tuple[int, dict[str, str]]]:
        try:
            handle = self.path.open(newline="", encoding="utf-8")
        except OSError as exc:
            raise InputFileError(
                str(self.path), 0, None, f"cannot read file: {exc.strerror}"
            ) from exc
        with handle:
            reader = csv.reader(handle)
            header = next(reader, None)
            if header is None:
                raise InputFileError(
                    str(self.path), 1, None, "file is empty; expected a CSV header"
                )
            header = [h.strip() for h in header]
            missing = [c for c in self.required if c not in header]
            if missing:
                raise InputFileError(
                    str(self.path),
                    1,
                    None,
                    f"header lacks column(s) {', '.join(missing)}; "
                    f"expected at least: {','.join(self.required)}",
                )
            for line, row in enumerate(reader, start=2):
                if not row or all(not cell.strip() for cell in row):
                    continue
                if len(row) > len(header):
                    raise InputFileError(
                        str(self.path),
                        line,
                        None,
                        f"{len(row)} fields but the header has {len(header)}",
                    )
                yield (
                    line,
                    {h: (row[k].strip() if k < len(row) else "") for k, h in enumerate(header)},
                )

    def cell(self, line: int, row: dict[str, str], column: str, parse: Callable[[str], T]) -> T:
        text = row.get(column, "")
        try:
            return parse(text)
        except (ValueError, GpupoolError) as exc:
            problem = str(exc) if isinstance(exc, GpupoolError) else f"invalid value {text!r}"
            raise InputFileError(str(self.path), line, column, problem) from exc


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


def _seconds(text: str) -> float | None:
    return float(text) if text else None


def load_nodes(path: str | Path) -> list[Node]:
    rows = _Rows(Path(path), NODE_COLUMNS)
    nodes: list[Node] = []
    for line, row in rows:
        gpus = rows.cell(line, row, "gpu", _count)
        model = row.get("model", "")
        if gpus and not model:
            raise InputFileError(str(path), line, "model", f"node has {gpus} GPUs but no model")
        if gpus:
            rows.cell(line, row, "model", parse_model_list)
        nodes.append(
            uniform_node(
                rows.cell(line, row, "sn", lambda s: s or _fail("node name is empty")),
                cpu_milli=rows.cell(line, row, "cpu_milli", _count),
                memory_mib=rows.cell(line, row, "memory_mib", _count),
                gpu_count=gpus,
                model=model or "T4",  # unused when the node has no GPUs
            )
        )
    if not nodes:
        raise InputFileError(str(path), 1, None, "no nodes in file")
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        raise InputFileError(str(path), 0, "sn", "node names repeat")
    return nodes


def _fail(message: str) -> str:
    raise ValueError(message)


def load_pods(path: str | Path) -> list[TracePod]:
    rows = _Rows(Path(path), POD_COLUMNS)
    pods: list[TracePod] = []
    for line, row in rows:
        count = rows.cell(line, row, "num_gpu", _count)
        milli = rows.cell(line, row, "gpu_milli", _count)
        if count and not 0 < milli <= MILLI:
            raise InputFileError(
                str(path),
                line,
                "gpu_milli",
                f"a GPU task needs gpu_milli between 1 and 1000; got {milli}",
            )
        if count > 1 and milli != MILLI:
            raise InputFileError(
                str(path),
                line,
                "gpu_milli",
                f"a task with {count} GPUs must take whole GPUs (gpu_milli 1000); got {milli}",
            )
        models = rows.cell(line, row, "gpu_spec", parse_model_list) if count else ()
        name = row["name"] or f"line-{line}"
        request = Request(
            name=name,
            cpu_milli=rows.cell(line, row, "cpu_milli", _count),
            memory_mib=rows.cell(line, row, "memory_mib", _count),
            gpu_count=count,
            gpu_milli=milli if count else None,
            models=models,
        )
        pods.append(
            TracePod(
                request=request,
                creation_time=rows.cell(line, row, "creation_time", _seconds) or 0.0,
                deletion_time=rows.cell(line, row, "deletion_time", _seconds),
                scheduled_time=rows.cell(line, row, "scheduled_time", _seconds),
                qos=row.get("qos", ""),
                phase=row.get("pod_phase", ""),
            )
        )
    if not pods:
        raise InputFileError(str(path), 1, None, "no pods in file")
    return pods
