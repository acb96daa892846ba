"""Fake GPU node specs and the Node objects built from them (pure functions)."""

from __future__ import annotations

import pytest

from gpupool.devcluster.errors import InvalidClusterSpec
from gpupool.devcluster.nodes import (
    FakeNodeSpec,
    build_node,
    fake_node_from_domain,
    node_specs,
    other_device_plugin,
    parse_gpu_spec,
)
from gpupool.domain.devices import Gpu, Node, uniform_node
from gpupool.domain.units import MiB


@pytest.mark.parametrize(
    ("text", "count", "model"),
    [
        ("8xA100-80GB", 8, "A100-80GB"),
        ("4 x h100", 4, "H100"),
        ("A100-80GB", 1, "A100-80GB"),
        ("2XT4", 2, "T4"),
        ("0xL4", 0, "L4"),
    ],
)
def test_parse_gpu_spec(text: str, count: int, model: str) -> None:
    spec = parse_gpu_spec(text)
    assert spec.model is not None
    assert (spec.count, spec.model.name) == (count, model)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("8xB999", "unknown GPU model 'B999'"),
        ("", "expected COUNTxMODEL"),
        ("65xA100-80GB", "at most 64"),
    ],
)
def test_parse_gpu_spec_rejects(text: str, fragment: str) -> None:
    with pytest.raises(InvalidClusterSpec, match=fragment):
        parse_gpu_spec(text)


def test_node_specs_names_and_count() -> None:
    specs = node_specs(3, parse_gpu_spec("8xA100-80GB"), prefix="n")
    assert [s.name for s in specs] == ["n-0", "n-1", "n-2"]
    with pytest.raises(InvalidClusterSpec):
        node_specs(-1, parse_gpu_spec("T4"))


def test_build_node_advertises_gpus_and_vgpus() -> None:
    node = build_node(FakeNodeSpec("gpu-node-0", parse_gpu_spec("8xA100-80GB")))
    labels = node["metadata"]["labels"]
    assert labels["type"] == "kwok"
    assert labels["gpupool.io/gpu-model"] == "A100-80GB"
    assert labels["gpupool.io/gpu-count"] == "8"
    assert labels["gpupool.io/gpu-memory-bytes"] == str(81920 * MiB)
    for key in ("capacity", "allocatable"):
        resources = node["status"][key]
        assert "nvidia.com/gpu" not in resources  # served by gpupool alone: no second path
        assert resources["gpupool.io/vgpu"] == "80"
        assert int(resources["pods"]) > 0


def test_build_node_without_disclosed_memory_has_no_memory_label() -> None:
    node = build_node(FakeNodeSpec("g", parse_gpu_spec("2xG2")))
    assert "gpupool.io/gpu-memory-bytes" not in node["metadata"]["labels"]
    assert node["status"]["capacity"]["gpupool.io/vgpu"] == "20"


def test_fake_node_from_domain_node() -> None:
    spec = fake_node_from_domain(
        uniform_node(
            "openb-node-0001", cpu_milli=64000, memory_mib=262144, gpu_count=2, model="V100M16"
        )
    )
    assert (spec.name, spec.cpu, spec.memory) == ("openb-node-0001", "64000m", "262144Mi")
    node = build_node(spec)
    assert node["metadata"]["labels"]["gpupool.io/gpu-model"] == "V100-16GB"
    assert node["status"]["capacity"]["gpupool.io/vgpu"] == "20"


def test_cpu_only_domain_node_has_no_gpu_model() -> None:
    spec = fake_node_from_domain(
        uniform_node("cpu-0", cpu_milli=1000, memory_mib=1024, gpu_count=0, model="T4")
    )
    node = build_node(spec)
    assert "gpupool.io/gpu-model" not in node["metadata"]["labels"]
    assert node["status"]["capacity"]["gpupool.io/vgpu"] == "0"


def test_other_device_plugin_patch_advertises_the_resource_and_takes_it_back() -> None:
    patch = other_device_plugin(8)
    assert patch["status"]["capacity"] == {"nvidia.com/gpu": "8"}
    assert patch["status"]["allocatable"] == {"nvidia.com/gpu": "8"}
    assert other_device_plugin(0)["status"]["capacity"] == {"nvidia.com/gpu": "0"}


def test_mixed_models_are_rejected() -> None:
    node = Node("mixed", 1000, 1024, gpus=(Gpu(0, "T4"), Gpu(1, "L4")))
    with pytest.raises(InvalidClusterSpec, match="mixed GPU models"):
        fake_node_from_domain(node)
