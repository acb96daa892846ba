"""The dev cluster's fake node agents: which nodes get a GpuNode, what its status says, pausing."""

from __future__ import annotations

import asyncio

from gpupool.adapters.kubernetes.node import gpus_from_gpunode
from gpupool.devcluster.heartbeat import (
    PAUSE_ANNOTATION,
    beat_rounds,
    fake_gpu_spec,
    fake_status,
    is_paused,
)
from gpupool.devcluster.nodes import FakeNodeSpec, build_node, parse_gpu_spec
from gpupool.domain.units import GiB
from gpupool.node.nvml.fake import fake_uuid


def test_a_fake_gpu_node_is_described_by_its_labels() -> None:
    node = build_node(FakeNodeSpec("n1", parse_gpu_spec("4xH100")))
    assert fake_gpu_spec(node) == "4xH100"


def test_nodes_without_gpus_get_no_gpunode() -> None:
    assert fake_gpu_spec(build_node(FakeNodeSpec("cpu", parse_gpu_spec("0xA100-80GB")))) is None
    assert fake_gpu_spec({"metadata": {"name": "other", "labels": {"type": "kwok"}}}) is None


def test_status_is_what_the_agent_publishes_and_placement_reads_it_back() -> None:
    status = fake_status("n1", "8xA100-80GB")
    assert "heartbeat" not in status  # the node's Lease is its heartbeat
    assert status["health"] == "Healthy"
    assert status["gpuCount"] == 8
    assert [d["uuid"] for d in status["devices"]] == [fake_uuid("n1", i) for i in range(8)]
    gpus = gpus_from_gpunode({"metadata": {"name": "n1"}, "status": status})
    assert {g.memory_bytes for g in gpus} == {72 * GiB}  # 80GB card less the 10% reserve
    assert {g.model for g in gpus} == {"A100-80GB"}


def test_only_the_pause_annotation_pauses() -> None:
    assert is_paused({"metadata": {"annotations": {PAUSE_ANNOTATION: "paused"}}})
    assert not is_paused({"metadata": {"annotations": {PAUSE_ANNOTATION: "no"}}})
    assert not is_paused({"metadata": {}})
    assert not is_paused(None)


def test_a_node_that_appears_between_rounds_gets_its_beat_at_once() -> None:
    """A whole round at start; a node's arrival brings a beat of the new nodes after the gather
    time, long before the hour-long period is up; stop ends the rounds."""

    async def scenario() -> list[bool]:
        stop, arrived, calls = asyncio.Event(), asyncio.Event(), []
        new_beat = asyncio.Event()

        async def beat(new_only: bool) -> None:
            calls.append(new_only)
            if new_only:
                new_beat.set()

        rounds = asyncio.create_task(beat_rounds(beat, stop, arrived, 3600.0, gather_s=0.01))
        await asyncio.sleep(0)  # the first round runs
        arrived.set()
        await asyncio.wait_for(new_beat.wait(), timeout=30)
        stop.set()
        await asyncio.wait_for(rounds, timeout=30)
        return calls

    assert asyncio.run(scenario()) == [False, True]
