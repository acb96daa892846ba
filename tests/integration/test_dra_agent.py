"""`gpupool agent --dra`: off by default, its wiring, and the DRA node runner serving the
kubelet's sockets while keeping the slice current (a recording publisher of our own interface
stands in for the API server; the real one: tests/e2e/test_dra_e2e.py)."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import grpc
import pytest
from support.waiting import wait_until_async

from gpupool.cli import agent as agent_cli
from gpupool.domain.devices import Gpu
from gpupool.node.dra.checkpoint import CheckpointStore
from gpupool.node.dra.plugin import DraPluginConfig, DraPluginServer
from gpupool.node.dra.prepare import ClaimPreparer, PrepareSettings
from gpupool.node.dra.proto import pluginregistration_pb2, pluginregistration_pb2_grpc
from gpupool.node.dra.runner import DraNode
from gpupool.node.dra.sources import InMemoryClaimSource
from gpupool.node.nvml import FakeInventory

BOUND = 20.0  # a hang guard, not a speed claim


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpupool")
    agent_cli.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["agent", *argv])


def test_dra_is_off_by_default_and_needs_an_api_server(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert parse("--node-name", "n1").dra is False
    args = parse("--node-name", "n1", "--fake-gpus", "2xT4", "--dra")
    assert agent_cli.run(args) == 2
    assert "--dra needs an API server" in capsys.readouterr().err


def test_the_dra_node_shares_the_device_plugins_settings(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    args = parse(
        "--node-name", "n1", "--fake-gpus", "2xT4", "--dra", "--kubeconfig", str(kubeconfig),
        "--vgpu-per-card", "4", "--reserve-pct", "5", "--limits-dir", "/host/limits",
        "--dra-state-dir", str(tmp_path / "dra"), "--kubelet-plugins-dir", "/kp",
        "--kubelet-registry-dir", "/kr", "--cdi-dir", "/cdi",
    )  # fmt: skip
    node = agent_cli.dra_node(args, agent_cli.build_inventory(args))
    config = node.server.config
    assert config.socket_path == Path("/kp/gpu.gpupool.io/dra.sock")
    assert config.registration_socket == Path("/kr/gpu.gpupool.io-reg.sock")
    settings = node.server.servicer.preparer.settings
    assert settings.paths == agent_cli.plugin_config(args).paths  # the device plugin's files
    assert (settings.node, settings.reserve_pct, settings.cdi_dir) == ("n1", 5, "/cdi")
    slices = node.publisher.settings  # type: ignore[attr-defined]
    assert (slices.node, slices.reserve_pct, slices.shares_per_card) == ("n1", 5, 4)
    assert node.interval_s == args.heartbeat


class RecordingPublisher:
    def __init__(self, fail_first: bool = False) -> None:
        self.seen: list[tuple[Gpu, ...]] = []
        self.fail_first = fail_first

        self.withdrawn = 0

    async def withdraw(self) -> None:
        self.withdrawn += 1

    async def publish(self, gpus: Sequence[Gpu]) -> int:
        self.seen.append(tuple(gpus))
        if self.fail_first and len(self.seen) == 1:
            raise RuntimeError("API server unreachable")
        return len({tuple(g.healthy for g in s) for s in self.seen})


def _node_parts(short_dir: Path) -> tuple[FakeInventory, ClaimPreparer, DraPluginConfig]:
    """Two fake cards on node n1, their claim preparer and the plugin's folders."""
    inventory = FakeInventory.from_spec("2xA100-80GB", node="n1")
    preparer = ClaimPreparer(
        PrepareSettings(node="n1", cdi_dir=str(short_dir / "cdi")),
        inventory,
        InMemoryClaimSource(),
        CheckpointStore(short_dir / "st"),
    )
    return (
        inventory,
        preparer,
        DraPluginConfig(plugin_dir=short_dir / "p", registry_dir=short_dir / "r"),
    )


def test_the_runner_serves_the_plugin_and_republishes_when_a_card_turns_unhealthy(
    short_dir: Path,
) -> None:
    async def main() -> None:
        inventory, preparer, config = _node_parts(short_dir)
        publisher = RecordingPublisher(fail_first=True)
        node = DraNode(DraPluginServer(config, preparer), publisher, inventory, interval_s=0.05,
                       runtime=_runtime("containerd://2.1.4"))  # fmt: skip
        stop = asyncio.Event()
        running = asyncio.create_task(node.run(stop))
        # a failed publish is retried at the next interval, not fatal
        await wait_until_async(lambda: node.published, BOUND, "a first successful publish")
        async with grpc.aio.insecure_channel(f"unix://{config.registration_socket}") as channel:
            stub = pluginregistration_pb2_grpc.RegistrationStub(channel)  # type: ignore[no-untyped-call]
            info = await stub.GetInfo(pluginregistration_pb2.InfoRequest())
            assert info.endpoint == str(config.socket_path)
        sick = inventory.devices()[1].uuid
        inventory.set_health(sick, False)
        await wait_until_async(
            lambda: any(not g.healthy for g in publisher.seen[-1]),
            BOUND,
            "a publish that sees the unhealthy card",
        )
        stop.set()
        await asyncio.wait_for(running, BOUND)
        assert not config.socket_path.exists()
        assert not config.registration_socket.exists()

    asyncio.run(main())


def _runtime(version: str) -> Callable[[], Awaitable[str]]:
    async def read() -> str:
        return version

    return read


def test_on_a_runtime_without_cdi_the_driver_withdraws_its_slice_and_serves_nothing(
    short_dir: Path,
) -> None:
    async def main() -> None:
        inventory, preparer, config = _node_parts(short_dir)
        publisher = RecordingPublisher()
        node = DraNode(DraPluginServer(config, preparer), publisher, inventory, interval_s=0.05,
                       runtime=_runtime("containerd://1.6.20"))  # fmt: skip
        stop = asyncio.Event()
        running = asyncio.create_task(node.run(stop))
        await wait_until_async(lambda: publisher.withdrawn == 1, BOUND, "the slice withdrawn")
        assert node.refused is not None and "does not apply CDI" in node.refused
        assert publisher.seen == []  # no slice published: no claim is placed here
        assert not config.registration_socket.exists()  # the kubelet finds no plugin
        stop.set()
        await asyncio.wait_for(running, BOUND)

    asyncio.run(main())
