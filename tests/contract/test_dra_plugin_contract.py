"""The DRA plugin's wire contract with the kubelet: the real gRPC servers on unix sockets, called
with the generated client stubs as the kubelet's plugin manager and DRA manager call them.

The kubelet side speaks k8s.io/kubelet pkg/apis/dra/v1 and pkg/apis/pluginregistration/v1: the
service paths, message fields and field numbers below are those (as read from upstream's
api.proto), so a stub that drifted from them fails here before it fails on a node.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from support.dra import claim_json, result
from support.kubelet import short_socket_dir

from gpupool.domain.devices import Gpu
from gpupool.domain.units import GiB
from gpupool.node.device_plugin.decide import PluginPaths
from gpupool.node.dra.cdi import read_spec
from gpupool.node.dra.checkpoint import CheckpointStore
from gpupool.node.dra.plugin import DraPluginConfig, DraPluginServer
from gpupool.node.dra.prepare import ClaimPreparer, PrepareSettings
from gpupool.node.dra.proto import (
    dra_health_pb2,
    dra_health_pb2_grpc,
    dra_pb2,
    dra_pb2_grpc,
    pluginregistration_pb2,
    pluginregistration_pb2_grpc,
)
from gpupool.node.dra.sources import InMemoryClaimSource
from gpupool.node.nvml import FakeInventory

BOUND = 20.0  # seconds: a hang guard, not a speed claim
A = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
GPUS = (Gpu(index=0, model="A100-80GB", uuid=A),)


@dataclass
class Rig:
    base: Path
    server: DraPluginServer
    source: InMemoryClaimSource
    dra: Any  # DRAPluginStub
    registration: Any  # RegistrationStub
    health: Any  # DRAResourceHealthStub
    inventory: FakeInventory


def run_rig(body: Callable[[Rig], Awaitable[None]], base: Path | None = None) -> None:
    async def main(root: Path) -> None:
        settings = PrepareSettings(
            node="n1",
            reserve_pct=10,
            paths=PluginPaths(
                limiter_host=str(root / "lib" / "libgpupool.so"),
                limits_host_dir=str(root / "limits"),
                usage_host_dir=str(root / "usage"),
                mps_pipe_host=str(root / "mps"),
            ),
            cdi_dir=str(root / "cdi"),
        )
        source = InMemoryClaimSource()
        inventory = FakeInventory(GPUS)
        preparer = ClaimPreparer(settings, inventory, source, CheckpointStore(root / "st"))
        config = DraPluginConfig(plugin_dir=root / "plugins", registry_dir=root / "registry")
        server = DraPluginServer(config, preparer, health_interval_s=0.05)
        await server.start()
        try:
            async with (
                grpc.aio.insecure_channel(f"unix://{config.socket_path}") as service,
                grpc.aio.insecure_channel(f"unix://{config.registration_socket}") as reg,
            ):
                rig = Rig(
                    root,
                    server,
                    source,
                    dra_pb2_grpc.DRAPluginStub(service),  # type: ignore[no-untyped-call]
                    pluginregistration_pb2_grpc.RegistrationStub(reg),  # type: ignore[no-untyped-call]
                    dra_health_pb2_grpc.DRAResourceHealthStub(service),  # type: ignore[no-untyped-call]
                    inventory,
                )
                await asyncio.wait_for(body(rig), BOUND)
        finally:
            await server.stop()

    if base is not None:
        asyncio.run(main(base))
        return
    with short_socket_dir("gp-dra-") as root:
        asyncio.run(main(root))


def claim(name: str) -> dra_pb2.Claim:
    return dra_pb2.Claim(namespace="team", name=name, uid=f"uid-{name}")


def test_the_stubs_speak_the_kubelets_service_paths_and_field_numbers() -> None:
    dra = dra_pb2.DESCRIPTOR.services_by_name["DRAPlugin"]
    assert dra.full_name == "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
    assert [m.name for m in dra.methods] == ["NodePrepareResources", "NodeUnprepareResources"]
    reg = pluginregistration_pb2.DESCRIPTOR.services_by_name["Registration"]
    assert reg.full_name == "pluginregistration.Registration"
    assert [m.name for m in reg.methods] == ["GetInfo", "NotifyRegistrationStatus"]

    def fields(message: Any) -> dict[str, int]:
        return {f.name: f.number for f in message.DESCRIPTOR.fields}

    assert fields(dra_pb2.Claim) == {"namespace": 1, "uid": 2, "name": 3}
    assert fields(dra_pb2.Device) == {
        "request_names": 1,
        "pool_name": 2,
        "device_name": 3,
        "cdi_device_ids": 4,
        "share_id": 5,
    }
    assert fields(dra_pb2.NodePrepareResourceResponse) == {"devices": 1, "error": 2}
    assert fields(dra_pb2.NodeUnprepareResourceResponse) == {"error": 1}
    assert fields(pluginregistration_pb2.PluginInfo) == {
        "type": 1,
        "name": 2,
        "endpoint": 3,
        "supported_versions": 4,
    }
    assert fields(pluginregistration_pb2.RegistrationStatus) == {
        "plugin_registered": 1,
        "error": 2,
    }
    # k8s.io/kubelet pkg/apis/dra-health/v1alpha1, which a 1.36 kubelet calls on the same socket
    health = dra_health_pb2.DESCRIPTOR.services_by_name["DRAResourceHealth"]
    assert health.full_name == "v1alpha1.DRAResourceHealth"
    assert [m.name for m in health.methods] == ["NodeWatchResources"]
    assert health.methods[0].server_streaming
    assert fields(dra_health_pb2.DeviceIdentifier) == {"pool_name": 1, "device_name": 2}
    assert fields(dra_health_pb2.DeviceHealth) == {
        "device": 1,
        "health": 2,
        "last_updated_time": 3,
        "health_check_timeout_seconds": 4,
        "message": 5,
    }
    assert fields(dra_health_pb2.NodeWatchResourcesResponse) == {"devices": 1}
    assert (dra_health_pb2.UNKNOWN, dra_health_pb2.HEALTHY, dra_health_pb2.UNHEALTHY) == (0, 1, 2)


def test_the_health_stream_reports_the_cards_and_a_card_turning_unhealthy() -> None:
    async def body(rig: Rig) -> None:
        stream = rig.health.NodeWatchResources(dra_health_pb2.NodeWatchResourcesRequest())
        first = await stream.read()
        [device] = first.devices
        assert (device.device.pool_name, device.device.device_name) == ("n1", "gpu-0")
        assert device.health == dra_health_pb2.HEALTHY
        assert device.health_check_timeout_seconds >= 30 and device.last_updated_time > 0
        rig.inventory.set_health(A, False)
        while True:  # the stream repeats the node every interval; the next reading sees it
            reading = await stream.read()
            if reading.devices[0].health == dra_health_pb2.UNHEALTHY:
                break
        assert A in reading.devices[0].message and "delete the pod" in reading.devices[0].message
        # a stopping plugin ends the stream cleanly: the kubelet reads EOF, not an error
        await rig.server.stop()
        while (end := await stream.read()) is not grpc.aio.EOF:
            assert end.devices  # readings sent before the stop
        assert await stream.code() == grpc.StatusCode.OK

    run_rig(body)


def test_the_kubelets_plugin_watcher_learns_the_driver_and_its_socket() -> None:
    async def body(rig: Rig) -> None:
        info = await rig.registration.GetInfo(pluginregistration_pb2.InfoRequest())
        assert info.type == "DRAPlugin"
        assert info.name == "gpu.gpupool.io"
        assert info.endpoint == str(rig.server.config.socket_path)
        assert list(info.supported_versions) == ["v1.DRAPlugin"]
        assert rig.server.config.registration_socket.name == "gpu.gpupool.io-reg.sock"
        await rig.registration.NotifyRegistrationStatus(
            pluginregistration_pb2.RegistrationStatus(plugin_registered=True)
        )
        status = await rig.server.registration.statuses.get()
        assert status.plugin_registered

    run_rig(body)


def test_prepare_answers_each_claim_and_a_bad_one_does_not_hold_back_the_rest() -> None:
    async def body(rig: Rig) -> None:
        rig.source.put(claim_json("good", result("gpu-0", memory="12Gi", compute="30")))
        rig.source.put(claim_json("huge", result("gpu-0", memory="100Gi")))
        request = dra_pb2.NodePrepareResourcesRequest(
            claims=[claim("good"), claim("huge"), claim("gone")]
        )
        answer = await rig.dra.NodePrepareResources(request)
        assert set(answer.claims) == {"uid-good", "uid-huge", "uid-gone"}

        good = answer.claims["uid-good"]
        assert good.error == ""
        [device] = good.devices
        assert list(device.request_names) == ["gpu"]
        assert (device.pool_name, device.device_name) == ("n1", "gpu-0")
        assert list(device.cdi_device_ids) == ["gpu.gpupool.io/claim=uid-good-gpu-0"]
        assert device.HasField("share_id") and device.share_id == "share-1"

        assert "cannot honour 100Gi" in answer.claims["uid-huge"].error
        assert not answer.claims["uid-huge"].devices
        assert "does not exist" in answer.claims["uid-gone"].error

        # what the runtime will apply: the CDI spec on disk names the device the kubelet got
        [spec_file] = (rig.base / "cdi").iterdir()
        spec = read_spec(spec_file.read_text(), str(spec_file))
        assert spec.device_names == ("uid-good-gpu-0",)
        assert spec.envs["NVIDIA_VISIBLE_DEVICES"] == A
        limits = next(m for m in spec.mounts if m.container_path == "/etc/gpupool/limits")
        assert Path(limits.host_path).read_text() == f"{A} {12 * GiB} 30\n"

        again = await rig.dra.NodePrepareResources(
            dra_pb2.NodePrepareResourcesRequest(claims=[claim("good")])
        )
        assert again.claims["uid-good"] == good

    run_rig(body)


def test_unprepare_cleans_up_and_answers_every_claim_even_unknown_ones() -> None:
    async def body(rig: Rig) -> None:
        rig.source.put(claim_json("good", result("gpu-0", memory="12Gi")))
        await rig.dra.NodePrepareResources(
            dra_pb2.NodePrepareResourcesRequest(claims=[claim("good")])
        )
        answer = await rig.dra.NodeUnprepareResources(
            dra_pb2.NodeUnprepareResourcesRequest(claims=[claim("good"), claim("never")])
        )
        assert set(answer.claims) == {"uid-good", "uid-never"}
        assert all(a.error == "" for a in answer.claims.values())
        assert list((rig.base / "cdi").iterdir()) == []
        assert list((rig.base / "limits").iterdir()) == []

    run_rig(body)


def test_a_restarted_plugin_answers_a_repeated_prepare_from_its_checkpoint() -> None:
    with short_socket_dir("gp-dra-") as root:
        first: dict[str, Any] = {}

        async def prepare(rig: Rig) -> None:
            rig.source.put(claim_json("good", result("gpu-0", memory="12Gi")))
            answer = await rig.dra.NodePrepareResources(
                dra_pb2.NodePrepareResourcesRequest(claims=[claim("good")])
            )
            first["answer"] = answer.claims["uid-good"]

        async def after_restart(rig: Rig) -> None:
            # a fresh source: the API server is not asked again, and has nothing to say
            answer = await rig.dra.NodePrepareResources(
                dra_pb2.NodePrepareResourcesRequest(claims=[claim("good")])
            )
            assert answer.claims["uid-good"] == first["answer"]
            assert rig.source.reads == 0

        run_rig(prepare, root)
        run_rig(after_restart, root)


def test_the_sockets_are_gone_after_stop() -> None:
    async def body(rig: Rig) -> None:
        assert rig.server.config.socket_path.exists()
        assert rig.server.config.registration_socket.exists()

    with short_socket_dir("gp-dra-") as root:
        run_rig(body, root)
        assert not (root / "plugins" / "dra.sock").exists()
        assert not (root / "registry" / "gpu.gpupool.io-reg.sock").exists()


@pytest.mark.parametrize("name", ["NodePrepareResources", "NodeUnprepareResources"])
def test_an_empty_batch_gets_an_empty_answer(name: str) -> None:
    async def body(rig: Rig) -> None:
        request_type = getattr(dra_pb2, f"{name}Request")
        answer = await getattr(rig.dra, name)(request_type())
        assert len(answer.claims) == 0

    run_rig(body)
