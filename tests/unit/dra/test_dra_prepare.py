"""Preparing and unpreparing claims: the pure plan (the device plugin's container, re-checked
cards) and the preparer on a real folder (idempotent, checkpointed, restartable)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support.dra import claim_json, mps_config, result

from gpupool.domain.allocations import Slice
from gpupool.domain.devices import Gpu
from gpupool.domain.units import GiB, MiB
from gpupool.node.device_plugin.decide import PluginPaths, container_setup, limits_text
from gpupool.node.dra.cdi import read_spec
from gpupool.node.dra.checkpoint import CheckpointStore, PreparedClaim
from gpupool.node.dra.claims import ClaimRef, read_allocated_claim
from gpupool.node.dra.errors import CheckpointCorrupt, ClaimNotServable
from gpupool.node.dra.prepare import ClaimPreparer, PrepareSettings, plan_claim
from gpupool.node.dra.slices import memory_limit
from gpupool.node.dra.sources import InMemoryClaimSource
from gpupool.node.nvml import FakeInventory
from gpupool.ports import PodLease

A = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
B = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
GPUS = (
    Gpu(index=0, model="A100-80GB", uuid=A, numa_node=0),
    Gpu(index=1, model="A100-80GB", uuid=B, numa_node=0),
)
SETTINGS = PrepareSettings(
    node="n1", reserve_pct=10, paths=PluginPaths(limits_host_dir="/host/limits")
)


def plan(raw: dict[str, Any], prepared: tuple[PreparedClaim, ...] = ()) -> PreparedClaim:
    uid = raw["metadata"]["uid"]
    return plan_claim(read_allocated_claim(raw, uid), GPUS, prepared, SETTINGS)


# ---- the plan (pure) ---------------------------------------------------------------------------


def test_a_claim_gets_the_container_the_device_plugin_gives_a_lease() -> None:
    done = plan(claim_json("train", result("gpu-1", memory="12Gi", compute="30")))
    assert done.limits_text == f"{B} {12 * GiB} 30\n"
    # the same setup the device plugin's Allocate answers, for the same slice
    piece = Slice(1, B, "A100-80GB", 0, 12 * GiB, 300)
    lease = PodLease("team/train", "team/trainer-0", "uid-trainer-0", "n1", (piece,))
    envs, mounts, limits_host, usage_host = container_setup(
        lease, ("dra:uid-train",), SETTINGS.paths
    )
    assert limits_text((piece,)) == done.limits_text
    assert (done.limits_path, done.usage_path) == (limits_host, usage_host)
    cdi = read_spec(done.cdi_text, "spec")
    assert cdi.envs == envs
    assert cdi.envs["NVIDIA_VISIBLE_DEVICES"] == B
    assert cdi.mounts == mounts
    assert cdi.device_names == ("uid-train-gpu-1",)
    [device] = done.devices
    assert (device.request, device.pool, device.device, device.share_id) == (
        "gpu",
        "n1",
        "gpu-1",
        "share-1",
    )
    assert device.cdi_device_id == "gpu.gpupool.io/claim=uid-train-gpu-1"


def test_mps_claims_get_the_mps_settings_at_their_compute_share() -> None:
    done = plan(
        claim_json("infer", result("gpu-0", memory="8Gi", compute="25"), config=mps_config())
    )
    cdi = read_spec(done.cdi_text, "spec")
    assert cdi.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert "CUDA_MPS_PIPE_DIRECTORY" in cdi.envs
    assert any(not m.read_only and "mps" in m.host_path for m in cdi.mounts)


def test_without_consumed_memory_the_claim_is_capped_at_the_whole_cards_share() -> None:
    done = plan(claim_json("whole", result("gpu-0")))
    assert done.limits_text == f"{A} {memory_limit(GPUS[0], 10)}\n"  # capped, compute uncapped


def test_a_claim_on_two_cards_limits_both_and_shows_both() -> None:
    done = plan(
        claim_json(
            "pair",
            result("gpu-0", memory="10Gi", request="a"),
            result("gpu-1", memory="20Gi", request="b"),
        )
    )
    assert done.limits_text == f"{A} {10 * GiB}\n{B} {20 * GiB}\n"
    cdi = read_spec(done.cdi_text, "spec")
    assert cdi.envs["NVIDIA_VISIBLE_DEVICES"] == f"{A},{B}"
    assert [d.request for d in done.devices] == ["a", "b"]


def test_two_requests_on_one_card_are_one_summed_line() -> None:
    done = plan(
        claim_json(
            "twice",
            result("gpu-0", memory="10Gi", compute="20", request="a"),
            result("gpu-0", memory="5Gi", compute="10", request="b"),
        )
    )
    assert done.limits_text == f"{A} {15 * GiB} 30\n"
    assert read_spec(done.cdi_text, "spec").device_names == ("uid-twice-gpu-0",)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (claim_json("w", result("gpu-0", pool="n2")), "pool 'n2', not this node's"),
        (claim_json("w", result("gpu-7")), r"device 'gpu-7' is not on this node .*gpu-0, gpu-1"),
        (claim_json("w", result("gpu-0", memory="100Gi")), "cannot honour 100Gi"),
        (claim_json("w", result("gpu-0", driver="other.example.com")), "no device of this driver"),
    ],
)
def test_a_claim_this_node_cannot_honour_is_refused(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ClaimNotServable, match=message):
        plan(raw)


def test_an_unhealthy_card_is_refused() -> None:
    raw = claim_json("w", result("gpu-0", memory="1Gi"))
    claim = read_allocated_claim(raw, "uid-w")
    sick = (replace(GPUS[0], healthy=False), GPUS[1])
    with pytest.raises(ClaimNotServable, match="is unhealthy; delete the pod"):
        plan_claim(claim, sick, (), SETTINGS)


def test_the_room_check_counts_the_claims_already_prepared() -> None:
    first = plan(claim_json("one", result("gpu-0", memory="40Gi")))
    with pytest.raises(ClaimNotServable, match=r"32Gi free of 72Gi .* 40Gi prepared for other"):
        plan(claim_json("two", result("gpu-0", memory="40Gi")), (first,))
    assert plan(claim_json("two", result("gpu-0", memory="32Gi")), (first,)).cards
    # the claim itself (a repeat) does not count against itself
    assert plan(claim_json("one", result("gpu-0", memory="40Gi")), (first,)).cards


# ---- the preparer on disk ----------------------------------------------------------------------


def rig(base: Path, source: InMemoryClaimSource) -> ClaimPreparer:
    settings = PrepareSettings(
        node="n1",
        reserve_pct=10,
        paths=PluginPaths(
            limiter_host=str(base / "lib" / "libgpupool.so"),
            limits_host_dir=str(base / "limits"),
            usage_host_dir=str(base / "usage"),
            mps_pipe_host=str(base / "mps"),
        ),
        cdi_dir=str(base / "cdi"),
    )
    inventory = FakeInventory(GPUS)
    return ClaimPreparer(settings, inventory, source, CheckpointStore(base / "state"))


def files_of(claim: PreparedClaim) -> list[Path]:
    return [Path(claim.limits_path), Path(claim.cdi_path), Path(claim.usage_path)]


REF = ClaimRef("team", "train", "uid-train")


def test_prepare_writes_the_files_and_a_repeat_changes_nothing(tmp_path: Path) -> None:
    source = InMemoryClaimSource()
    source.put(claim_json("train", result("gpu-0", memory="12Gi", compute="30")))
    preparer = rig(tmp_path, source)
    done = asyncio.run(preparer.prepare(REF))
    assert Path(done.limits_path).read_text() == f"{A} {12 * GiB} 30\n"
    assert read_spec(Path(done.cdi_path).read_text(), done.cdi_path).device_names == (
        "uid-train-gpu-0",
    )
    assert Path(done.usage_path).is_dir()
    checkpoint = json.loads((tmp_path / "state" / "uid-train.json").read_text())
    assert checkpoint["claim"] == {"namespace": "team", "name": "train", "uid": "uid-train"}
    again = asyncio.run(preparer.prepare(REF))
    assert again == done
    assert source.reads == 1  # a repeat answers from what was prepared


def test_a_restarted_agent_loses_nothing(tmp_path: Path) -> None:
    source = InMemoryClaimSource()
    source.put(claim_json("train", result("gpu-0", memory="40Gi")))
    done = asyncio.run(rig(tmp_path, source).prepare(REF))
    Path(done.limits_path).unlink()  # lost while the agent was down
    source.delete("team", "train")  # and the API server is of no help now

    restarted = rig(tmp_path, source)
    assert restarted.prepared == (done,)
    assert asyncio.run(restarted.prepare(REF)) == done
    assert Path(done.limits_path).read_text() == done.limits_text  # put back
    # what each card holds survives too: a second claim is checked against the first
    source.put(claim_json("more", result("gpu-0", memory="40Gi")))
    with pytest.raises(ClaimNotServable, match="prepared for other claims"):
        asyncio.run(restarted.prepare(ClaimRef("team", "more", "uid-more")))
    # and a claim whose pods ended while it was down can still be cleaned up
    assert restarted.unprepare("uid-train")
    assert not any(p.exists() for p in files_of(done))


def test_a_crash_before_the_checkpoint_is_repeated_harmlessly(tmp_path: Path) -> None:
    source = InMemoryClaimSource()
    source.put(claim_json("train", result("gpu-0", memory="12Gi")))
    done = asyncio.run(rig(tmp_path, source).prepare(REF))
    (tmp_path / "state" / "uid-train.json").unlink()  # files written, checkpoint not
    again = asyncio.run(rig(tmp_path, source).prepare(REF))
    assert again == done
    assert sorted(p.name for p in (tmp_path / "cdi").iterdir()) == [Path(done.cdi_path).name]


def test_unprepare_removes_everything_and_is_idempotent(tmp_path: Path) -> None:
    source = InMemoryClaimSource()
    source.put(claim_json("train", result("gpu-0", memory="12Gi")))
    preparer = rig(tmp_path, source)
    done = asyncio.run(preparer.prepare(REF))
    assert preparer.unprepare("uid-train") is True
    assert not any(p.exists() for p in files_of(done))
    assert list((tmp_path / "state").iterdir()) == []
    assert preparer.unprepare("uid-train") is False
    assert rig(tmp_path, source).prepared == ()


def test_a_refused_claim_writes_nothing(tmp_path: Path) -> None:
    source = InMemoryClaimSource()
    source.put(claim_json("train", result("gpu-0", memory="100Gi")))
    preparer = rig(tmp_path, source)
    with pytest.raises(ClaimNotServable, match="cannot honour"):
        asyncio.run(preparer.prepare(REF))
    assert not (tmp_path / "limits").exists()
    assert not (tmp_path / "cdi").exists()
    assert preparer.prepared == ()


def test_an_unreadable_checkpoint_stops_the_plugin_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "uid-x.json").write_text('{"format": 1, "claim": {}}')
    with pytest.raises(CheckpointCorrupt, match=r"uid-x\.json: not a DRA checkpoint .* move it"):
        rig(tmp_path, InMemoryClaimSource())


def test_memory_sizes_in_the_limits_file_are_bytes_as_the_device_plugin_writes() -> None:
    done = plan(claim_json("odd", result("gpu-0", memory="1500Mi")))
    assert done.limits_text == f"{A} {1500 * MiB}\n"
