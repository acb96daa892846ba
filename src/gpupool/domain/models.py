"""The GPU models gpupool knows: memory as the driver reports it and streaming multiprocessors.

Memory figures are the totals nvidia-smi shows for each board (MiB), which is what a slice is
carved from. G2 and G3 are Alibaba's undisclosed codes in the openb trace: they are valid model
names whose memory and SM count are unknown, so only fractional requests can land on them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpupool.domain.errors import InvalidNode, UnknownGpuModel
from gpupool.domain.units import MiB


@dataclass(frozen=True, slots=True)
class GpuModel:
    name: str
    memory_bytes: int | None  # None: not disclosed (trace codes)
    sm_count: int | None
    aliases: tuple[str, ...] = ()

    @property
    def known(self) -> bool:
        return self.memory_bytes is not None


CATALOGUE: tuple[GpuModel, ...] = (
    GpuModel("A100-40GB", 40960 * MiB, 108, ("A100-SXM4-40GB", "A100-PCIE-40GB", "A100")),
    GpuModel("A100-80GB", 81920 * MiB, 108, ("A100-SXM4-80GB", "A100-PCIE-80GB", "A800")),
    GpuModel("H100", 81559 * MiB, 132, ("H100-80GB", "H100-SXM5-80GB", "H100-SXM")),
    GpuModel("H800", 81559 * MiB, 132, ("H800-80GB",)),
    GpuModel("H200", 143771 * MiB, 132, ("H200-141GB", "H200-SXM")),
    GpuModel("L4", 23034 * MiB, 58),
    GpuModel("A10", 23028 * MiB, 72, ("A10-24GB",)),
    GpuModel("T4", 15360 * MiB, 40, ("Tesla-T4",)),
    GpuModel("V100-16GB", 16384 * MiB, 80, ("V100M16", "V100-SXM2-16GB", "V100")),
    GpuModel("V100-32GB", 32768 * MiB, 80, ("V100M32", "V100-SXM2-32GB")),
    GpuModel("P100", 16384 * MiB, 56, ("P100-16GB", "Tesla-P100")),
    GpuModel("RTX-3090", 24576 * MiB, 82, ("RTX3090", "GeForce-RTX-3090", "3090")),
    GpuModel("RTX-4090", 24564 * MiB, 128, ("RTX4090", "GeForce-RTX-4090", "4090")),
    GpuModel("G2", None, None),
    GpuModel("G3", None, None),
)


def _key(name: str) -> str:
    return name.strip().upper().replace("_", "-").replace(" ", "-")


_BY_NAME: dict[str, GpuModel] = {}
for _model in CATALOGUE:
    for _name in (_model.name, *_model.aliases):
        _BY_NAME[_key(_name)] = _model


def get_model(name: str) -> GpuModel:
    """Look a model up by name or alias (case-insensitive); raise UnknownGpuModel if absent."""
    model = _BY_NAME.get(_key(name))
    if model is None:
        known = ", ".join(m.name for m in CATALOGUE)
        raise UnknownGpuModel(f"unknown GPU model {name!r}; known models: {known}")
    return model


def parse_model_list(text: str) -> tuple[str, ...]:
    """Parse `A100|H800` (also commas) into canonical model names; empty text means any model."""
    names = [part for part in text.replace(",", "|").split("|") if part.strip()]
    return tuple(dict.fromkeys(get_model(part).name for part in names))


_GPU_PART = re.compile(r"^\s*(?:(\d+)\s*[xX]\s*)?([A-Za-z0-9][A-Za-z0-9_. -]*?)\s*$")


def parse_gpu_list(text: str) -> tuple[tuple[int, GpuModel], ...]:
    """`8xA100-80GB`, `2xH800,1xT4` or a bare `T4` (one card) → (count, model) pairs.

    Counts may be 0 (a node without cards); unknown models raise UnknownGpuModel.
    """
    parts = [p for p in str(text).split(",") if p.strip()]
    if not parts:
        raise InvalidNode(f"expected COUNTxMODEL such as 8xA100-80GB or 2xH800,1xT4; got {text!r}")
    result: list[tuple[int, GpuModel]] = []
    for part in parts:
        match = _GPU_PART.match(part)
        if match is None:
            raise InvalidNode(f"expected COUNTxMODEL such as 8xA100-80GB; got {part.strip()!r}")
        result.append((int(match.group(1) or 1), get_model(match.group(2))))
    return tuple(result)
