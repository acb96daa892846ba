"""Board names to catalogue models, XID triage, NVLink domains, fake specs."""

from __future__ import annotations

import pytest

from gpupool.domain.errors import InvalidNode, UnknownGpuModel
from gpupool.domain.units import MiB
from gpupool.node.nvml import (
    FakeInventory,
    model_for_board,
    nvlink_domains,
    parse_fake_spec,
    xid_is_fatal,
)
from gpupool.node.nvml.boards import nvlink_peers


@pytest.mark.parametrize(
    ("board", "memory_mib", "model"),
    [
        ("NVIDIA A100-SXM4-80GB", 81920, "A100-80GB"),
        ("NVIDIA A100-SXM4-40GB", 40960, "A100-40GB"),
        ("NVIDIA A100-PCIE-40GB", 40960, "A100-40GB"),
        ("NVIDIA A100 80GB PCIe", 81920, "A100-80GB"),
        ("NVIDIA A100", 81920, "A100-80GB"),  # bare family name: memory decides
        ("NVIDIA A100", 40960, "A100-40GB"),
        ("NVIDIA H100 80GB HBM3", 81559, "H100"),
        ("NVIDIA H100 PCIe", 81559, "H100"),
        ("NVIDIA H800", 81559, "H800"),
        ("NVIDIA H200", 143771, "H200"),
        ("NVIDIA L4", 23034, "L4"),
        ("NVIDIA A10", 23028, "A10"),
        ("Tesla T4", 15360, "T4"),
        ("Tesla V100-SXM2-32GB", 32768, "V100-32GB"),
        ("NVIDIA GeForce RTX 4090", 24564, "RTX-4090"),
        ("NVIDIA GeForce RTX 3090", 24576, "RTX-3090"),
    ],
)
def test_board_names_map_to_catalogue(board: str, memory_mib: int, model: str) -> None:
    assert model_for_board(board, memory_mib * MiB) == model


@pytest.mark.parametrize(
    ("board", "memory_mib"),
    [("NVIDIA B200", 183359), ("NVIDIA GeForce GTX 1080", 8192), ("NVIDIA A100", 24000)],
)
def test_unknown_boards_get_a_clear_error(board: str, memory_mib: int) -> None:
    with pytest.raises(UnknownGpuModel) as err:
        model_for_board(board, memory_mib * MiB)
    assert board in str(err.value)
    assert "CATALOGUE" in str(err.value)


@pytest.mark.parametrize(
    ("xid", "ignored", "fatal"),
    [
        (79, (), True),
        (48, (), True),
        (13, (), False),
        (31, (), False),
        (43, (), False),
        (94, (94,), False),
        (94, (), True),
    ],
)
def test_xid_triage(xid: int, ignored: tuple[int, ...], fatal: bool) -> None:
    assert xid_is_fatal(xid, ignored) is fatal


@pytest.mark.parametrize(
    ("links", "domains"),
    [
        ({"a": [], "b": []}, {"a": None, "b": None}),
        ({"a": ["b"], "b": ["a"], "c": []}, {"a": 0, "b": 0, "c": None}),
        # NVSwitch: every card reaches the same switch
        ({"a": ["switch:1"], "b": ["switch:1"], "c": ["switch:1"]}, {"a": 0, "b": 0, "c": 0}),
        # two islands of two
        ({"a": ["b"], "b": ["a"], "c": ["d"], "d": ["c"]}, {"a": 0, "b": 0, "c": 1, "d": 1}),
        # a one-sided link still joins both ends
        ({"a": ["b"], "b": []}, {"a": 0, "b": 0}),
    ],
)
def test_nvlink_domains(links: dict[str, list[str]], domains: dict[str, int | None]) -> None:
    assert nvlink_domains(links) == domains


def test_nvlink_peers_are_the_rest_of_the_domain() -> None:
    peers = nvlink_peers({"a": 0, "b": 0, "c": None, "d": 1, "e": 0})
    assert peers == {"a": ("b", "e"), "b": ("a", "e"), "c": (), "d": (), "e": ("a", "b")}


@pytest.mark.parametrize(
    ("spec", "parsed"),
    [
        ("8xA100-80GB", ((8, "A100-80GB"),)),
        ("2xH800,1xT4", ((2, "H800"), (1, "T4"))),
        ("T4", ((1, "T4"),)),
        (" 4 x a100-sxm4-40gb ", ((4, "A100-40GB"),)),
    ],
)
def test_fake_spec_parses(spec: str, parsed: tuple[tuple[int, str], ...]) -> None:
    assert parse_fake_spec(spec) == parsed


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "empty"),
        ("0xT4", "count"),
        ("8xB9000", "unknown GPU model"),
        ("2xG2", "memory"),
        ("x", "unknown GPU model"),
    ],
)
def test_fake_spec_rejects_nonsense(spec: str, message: str) -> None:
    with pytest.raises((InvalidNode, UnknownGpuModel)) as err:
        parse_fake_spec(spec)
    assert message in str(err.value)


def test_fake_inventory_from_spec() -> None:
    inventory = FakeInventory.from_spec("4xA100-80GB,2xT4", node="n1")
    gpus = inventory.devices()
    assert [g.index for g in gpus] == [0, 1, 2, 3, 4, 5]
    assert [g.model for g in gpus] == ["A100-80GB"] * 4 + ["T4"] * 2
    assert [g.numa_node for g in gpus] == [0, 0, 1, 1, 0, 1]
    assert [g.nvlink_domain for g in gpus] == [0, 0, 0, 0, None, None]
    assert len({g.uuid for g in gpus}) == 6
    assert all(g.uuid.startswith("GPU-") and g.healthy for g in gpus)
    # uuids are stable for a node name and differ between nodes
    again = FakeInventory.from_spec("4xA100-80GB,2xT4", node="n1").devices()
    other = FakeInventory.from_spec("4xA100-80GB,2xT4", node="n2").devices()
    assert [g.uuid for g in again] == [g.uuid for g in gpus]
    assert not {g.uuid for g in other} & {g.uuid for g in gpus}
    facts = {f.uuid: f for f in inventory.facts().gpus}
    assert facts[gpus[0].uuid].sm_count == 108
    assert facts[gpus[0].uuid].nvlink_peers == (gpus[1].uuid, gpus[2].uuid, gpus[3].uuid)
    assert facts[gpus[4].uuid].nvlink_peers == ()
    assert facts[gpus[4].uuid].sm_count == 40
