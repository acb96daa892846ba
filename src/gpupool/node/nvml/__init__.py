"""The node's GPUs: discovered with NVML (nvidia-ml-py) or from a fake spec (kwok, tests)."""

from gpupool.node.nvml.boards import model_for_board, nvlink_domains, xid_is_fatal
from gpupool.node.nvml.discovery import NvmlInventory
from gpupool.node.nvml.fake import FakeInventory, parse_fake_spec

__all__ = [
    "FakeInventory",
    "NvmlInventory",
    "model_for_board",
    "nvlink_domains",
    "parse_fake_spec",
    "xid_is_fatal",
]
