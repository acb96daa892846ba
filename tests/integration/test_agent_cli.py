"""`gpupool agent`: argument handling, and the whole agent against a fake kubelet."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import grpc
import pytest
from support.kubelet import FakeKubelet, fake_kubelet

from gpupool.cli import agent as agent_cli
from gpupool.domain.units import GiB, MiB
from gpupool.node.agent import NodeAgent, node_report
from gpupool.node.device_plugin.proto import api_pb2, api_pb2_grpc
from gpupool.node.device_plugin.server import DevicePluginServer, PluginConfig
from gpupool.node.device_plugin.sources import InMemoryAllocationSource
from gpupool.node.nvml import FakeInventory
from gpupool.ports import NodeReport

BOUND = 20.0  # a hang guard, not a speed claim


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpupool")
    agent_cli.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["agent", *argv])


def test_defaults() -> None:
    args = parse("--node-name", "n1", "--fake-gpus", "8xA100-80GB")
    assert args.func is agent_cli.run
    config = agent_cli.plugin_config(args)
    assert config.node == "n1"
    assert config.plugin_dir == Path("/var/lib/kubelet/device-plugins")
    assert config.socket_path == Path("/var/lib/kubelet/device-plugins/gpupool-vgpu.sock")
    assert config.resource_name == "gpupool.io/vgpu"
    assert config.per_card == 10
    assert config.reserve_pct == 10
    assert config.paths.preload == "env"
    inventory = agent_cli.build_inventory(args)
    assert len(inventory.devices()) == 8


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--fake-gpus", "2xT4"], 2, "--node-name is required"),
        (["--node-name", "n1", "--reserve-pct", "100"], 2, "--reserve-pct"),
        (["--node-name", "n1", "--vgpu-per-card", "0"], 2, "--vgpu-per-card"),
        (["--node-name", "n1", "--ignore-xids", "79,x"], 2, "--ignore-xids"),
        (["--node-name", "n1", "--fake-gpus", "8xB9000"], 1, "unknown GPU model 'B9000'"),
    ],
)
def test_bad_arguments_get_a_message(
    argv: list[str],
    code: int,
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert agent_cli.run(parse(*argv)) == code
    assert message in capsys.readouterr().err


def test_node_report_keeps_the_reserve() -> None:
    inventory = FakeInventory.from_spec("1xA100-80GB,1xT4", node="n1")
    report = node_report("n1", inventory.devices(), inventory.facts(), 10)
    a100, t4 = inventory.devices()
    assert report.allocatable_bytes == ((a100.uuid, 72 * GiB), (t4.uuid, 13824 * MiB))
    assert report.gpus == inventory.devices()


def test_agent_serves_the_device_plugin_with_the_lease_source_unwired(short_dir: Path) -> None:
    plugin_dir = short_dir / "device-plugins"
    plugin_dir.mkdir()
    args = parse(
        "--node-name",
        "kwok-n1",
        "--fake-gpus",
        "2xA100-80GB",
        "--device-plugin-dir",
        str(plugin_dir),
        "--limits-dir",
        str(short_dir / "limits"),
        "--vgpu-per-card",
        "4",
    )

    async def main() -> None:
        async with fake_kubelet(plugin_dir) as kubelet:
            stop = asyncio.Event()
            running = asyncio.create_task(agent_cli.run_agent(args, stop))
            try:
                registered = await asyncio.wait_for(kubelet.requests.get(), BOUND)
                assert registered.resource_name == "gpupool.io/vgpu"
                await allocate_says_unwired(plugin_dir / registered.endpoint)
            finally:
                stop.set()
                await asyncio.wait_for(running, BOUND)
        assert not (plugin_dir / "gpupool-vgpu.sock").exists()

    async def allocate_says_unwired(socket: Path) -> None:
        async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
            stub = api_pb2_grpc.DevicePluginStub(channel)  # type: ignore[no-untyped-call]
            stream = stub.ListAndWatch(api_pb2.Empty())
            devices = (await asyncio.wait_for(stream.read(), BOUND)).devices
            assert len(devices) == 8
            stream.cancel()
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.Allocate(
                    api_pb2.AllocateRequest(
                        container_requests=[
                            api_pb2.ContainerAllocateRequest(devices_ids=[devices[0].ID])
                        ]
                    )
                )
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "lease source" in (err.value.details() or "")

    asyncio.run(main())


class RecordingReporter:
    def __init__(self) -> None:
        self.reports: asyncio.Queue[NodeReport] = asyncio.Queue()
        self.renewals: asyncio.Queue[str] = asyncio.Queue()

    async def publish(self, report: NodeReport) -> None:
        await self.reports.put(report)

    async def renew(self, node: str) -> None:
        await self.renewals.put(node)


def test_agent_publishes_a_report_and_another_when_health_changes(short_dir: Path) -> None:
    plugin_dir = short_dir / "device-plugins"
    plugin_dir.mkdir()

    async def main() -> None:
        async with fake_kubelet(plugin_dir) as kubelet:
            await publishes(kubelet)

    async def publishes(kubelet: FakeKubelet) -> None:
        inventory = FakeInventory.from_spec("2xH800", node="n1")
        config = PluginConfig(node="n1", plugin_dir=plugin_dir)
        reporter = RecordingReporter()
        agent = NodeAgent(
            node="n1",
            plugin=DevicePluginServer(config, inventory, InMemoryAllocationSource()),
            reporter=reporter,
            reserve_pct=10,
            heartbeat_s=3600,  # only the health change can cause the second report
        )
        stop = asyncio.Event()
        running = asyncio.create_task(agent.run(stop))
        try:
            first = await asyncio.wait_for(reporter.reports.get(), BOUND)
            assert [g.healthy for g in first.gpus] == [True, True]
            await asyncio.wait_for(kubelet.requests.get(), BOUND)
            inventory.set_health(first.gpus[1].uuid, False, "XID 79")
            second = await asyncio.wait_for(reporter.reports.get(), BOUND)
            assert [g.healthy for g in second.gpus] == [True, False]
        finally:
            stop.set()
            await asyncio.wait_for(running, BOUND)

    asyncio.run(main())


def test_agent_renews_its_lease_every_period_and_publishes_only_a_changed_report(
    short_dir: Path,
) -> None:
    """The heartbeat is the Lease: an idle node renews it every period and publishes its report
    once; a card's health change publishes again."""
    plugin_dir = short_dir / "device-plugins"
    plugin_dir.mkdir()

    async def main() -> None:
        async with fake_kubelet(plugin_dir):
            await beats()

    async def beats() -> None:
        inventory = FakeInventory.from_spec("2xH800", node="n1")
        config = PluginConfig(node="n1", plugin_dir=plugin_dir)
        reporter = RecordingReporter()
        agent = NodeAgent(
            node="n1",
            plugin=DevicePluginServer(config, inventory, InMemoryAllocationSource()),
            reporter=reporter,
            reserve_pct=10,
            heartbeat_s=0.01,
            resync_s=3600,  # no resync publish within the test
        )
        stop = asyncio.Event()
        running = asyncio.create_task(agent.run(stop))
        try:
            for _ in range(5):
                assert await asyncio.wait_for(reporter.renewals.get(), BOUND) == "n1"
            first = reporter.reports.get_nowait()
            assert reporter.reports.empty()  # five periods, one report
            inventory.set_health(first.gpus[0].uuid, False, "XID 79")
            second = await asyncio.wait_for(reporter.reports.get(), BOUND)
            assert [g.healthy for g in second.gpus] == [False, True]
        finally:
            stop.set()
            await asyncio.wait_for(running, BOUND)

    asyncio.run(main())
