"""Values only: units, GPU models, devices, requests, allocations and the errors for bad input."""

from gpupool.domain.allocations import Allocation, Slice
from gpupool.domain.devices import Gpu, Node, uniform_node
from gpupool.domain.errors import (
    GpupoolError,
    InputFileError,
    InvalidNode,
    InvalidQuantity,
    InvalidRequest,
    RequestExceedsCluster,
    UnknownGpuModel,
)
from gpupool.domain.models import CATALOGUE, GpuModel, get_model, parse_model_list
from gpupool.domain.requests import MILLI, Request
from gpupool.domain.units import GiB, MiB, format_bytes, parse_bytes

__all__ = [
    "CATALOGUE",
    "MILLI",
    "Allocation",
    "GiB",
    "Gpu",
    "GpuModel",
    "GpupoolError",
    "InputFileError",
    "InvalidNode",
    "InvalidQuantity",
    "InvalidRequest",
    "MiB",
    "Node",
    "Request",
    "RequestExceedsCluster",
    "Slice",
    "UnknownGpuModel",
    "format_bytes",
    "get_model",
    "parse_bytes",
    "parse_model_list",
    "uniform_node",
]
