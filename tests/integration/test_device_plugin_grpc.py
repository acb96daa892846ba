"""The device plugin over real gRPC on unix sockets, against a fake kubelet of our own.

Each test runs its own event loop (asyncio.run). Waits are bounded by generous timeouts that only
turn a hang into a failure; nothing asserts how fast anything is.
"""

from __future__ import annotations

import asyncio
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import grpc
import pytest
from support.builders import node_json
from support.builders import pod_json as user_pod
from support.kubelet import FakeKubelet, fake_kubelet

from gpupool.adapters.extender_http.lease_plan import plan_lease
from gpupool.adapters.extender_http.plans import Planners
from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod
from gpupool.adapters.kubernetes.lease import lease_from_json, lease_to_json, pod_lease
from gpupool.adapters.kubernetes.node import read_node
from gpupool.adapters.wire.compute_modes import read_compute_modes
from gpupool.domain.allocations import Slice
from gpupool.domain.sockets import SocketPathTooLong
from gpupool.domain.units import GiB
from gpupool.node.agent import NodeAgent
from gpupool.node.device_plugin.decide import PluginPaths, allocation_key, limits_file_name
from gpupool.node.device_plugin.proto import api_pb2, api_pb2_grpc
from gpupool.node.device_plugin.server import DevicePluginServer, PluginConfig
from gpupool.node.device_plugin.sources import InMemoryAllocationSource, UnwiredAllocationSource
from gpupool.node.nvml import FakeInventory
from gpupool.ports import AllocationSource, PodLease
from gpupool.state.cluster import ClusterCache
from gpupool.state.lease import LeaseRecord

BOUND = 20.0  # seconds: a hang guard, not a speed claim


class CountingSource(InMemoryAllocationSource):
    def __init__(self) -> None:
        super().__init__()
        self.recorded: list[tuple[str, tuple[str, ...]]] = []

    async def record_devices(self, lease: str, device_ids: tuple[str, ...]) -> None:
        self.recorded.append((lease, tuple(device_ids)))
        await super().record_devices(lease, device_ids)


class BrokenSource:
    async def leases_on(self, node: str) -> tuple[PodLease, ...]:
        raise RuntimeError("lease cache corrupted")

    async def record_devices(self, lease: str, device_ids: tuple[str, ...]) -> None:
        raise RuntimeError("not reached")


@dataclass
class Rig:
    dir: Path
    inventory: FakeInventory
    source: Any
    server: DevicePluginServer
    kubelet: FakeKubelet
    stub: Any
    registered: api_pb2.RegisterRequest  # the first Register: the plugin serves from then on

    @property
    def uuids(self) -> list[str]:
        return [g.uuid for g in self.inventory.devices()]


def plugin_config(base: Path, per_card: int, watch_interval_s: float = 2.0) -> PluginConfig:
    """The plugin's configuration with every host folder under `base`."""
    return PluginConfig(
        node="n1",
        plugin_dir=base / "device-plugins",
        per_card=per_card,
        reserve_pct=10,
        paths=PluginPaths(
            limiter_host=str(base / "lib" / "libgpupool.so"),
            limits_host_dir=str(base / "limits"),
            usage_host_dir=str(base / "usage"),
            mps_pipe_host=str(base / "mps"),
        ),
        watch_interval_s=watch_interval_s,
        lease_wait_s=0.3,  # a missing lease is waited for this long (a test's "no lease")
        lease_poll_s=0.02,
    )


def run_rig(
    base: Path,
    body: Callable[[Rig], Awaitable[None]],
    *,
    source: AllocationSource | None = None,
    spec: str = "2xA100-80GB",
    per_card: int = 3,
) -> None:
    async def main() -> None:
        plugin_dir = base / "device-plugins"
        plugin_dir.mkdir()
        inventory = FakeInventory.from_spec(spec, node="n1")
        config = plugin_config(base, per_card, watch_interval_s=0.05)
        chosen: Any = source if source is not None else CountingSource()
        async with fake_kubelet(plugin_dir) as kubelet:
            server = DevicePluginServer(config, inventory, chosen)
            stop = asyncio.Event()
            # the agent runs the plugin and follows the inventory's health events (as in production)
            agent = NodeAgent(node="n1", plugin=server, reporter=None, reserve_pct=10)
            running = asyncio.create_task(agent.run(stop))
            try:
                async with grpc.aio.insecure_channel(f"unix://{config.socket_path}") as channel:
                    stub = api_pb2_grpc.DevicePluginStub(channel)  # type: ignore[no-untyped-call]
                    first = await asyncio.wait_for(kubelet.requests.get(), BOUND)
                    rig = Rig(base, inventory, chosen, server, kubelet, stub, first)
                    await asyncio.wait_for(body(rig), BOUND)
            finally:
                stop.set()
                await asyncio.wait_for(running, BOUND)

    asyncio.run(main())


def lease(
    rig: Rig, name: str, *cards: int, gib: int = 12, pct: int = 0, mode: str | None = None
) -> PodLease:
    uuids = rig.uuids
    return PodLease(
        lease=f"team-a/{name}",
        pod=f"team-a/{name}",
        pod_uid=f"uid-{name}",
        node="n1",
        slices=tuple(Slice(c, uuids[c], "A100-80GB", 0, gib * GiB, pct * 10) for c in cards),
        compute_mode=mode,
    )


async def allocate(rig: Rig, *device_ids: str) -> api_pb2.AllocateResponse:
    request = api_pb2.AllocateRequest(
        container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=list(device_ids))]
    )
    response: api_pb2.AllocateResponse = await rig.stub.Allocate(request)
    return response


async def allocate_error(rig: Rig, *device_ids: str) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await allocate(rig, *device_ids)
    return err.value


# -- registration, options, ListAndWatch ---------------------------------------------------------


def test_registers_then_lists_devices_and_follows_health(short_dir: Path) -> None:
    async def body(rig: Rig) -> None:
        registered = rig.registered
        assert registered.version == "v1beta1"
        assert registered.resource_name == "gpupool.io/vgpu"
        assert registered.endpoint == "gpupool-vgpu.sock"
        assert registered.options.get_preferred_allocation_available
        assert not registered.options.pre_start_required

        options = await rig.stub.GetDevicePluginOptions(api_pb2.Empty())
        assert options.get_preferred_allocation_available

        stream = rig.stub.ListAndWatch(api_pb2.Empty())
        first = await stream.read()
        a, b = rig.uuids
        assert [d.ID for d in first.devices] == [f"{u}::{s}" for u in (a, b) for s in range(3)]
        assert {d.health for d in first.devices} == {"Healthy"}
        assert [d.topology.nodes[0].ID for d in first.devices] == [0, 0, 0, 1, 1, 1]

        rig.inventory.set_health(a, False, "XID 79")
        flipped = await stream.read()
        health = {d.ID: d.health for d in flipped.devices}
        assert [health[f"{a}::{s}"] for s in range(3)] == ["Unhealthy"] * 3
        assert [health[f"{b}::{s}"] for s in range(3)] == ["Healthy"] * 3

        rig.inventory.set_health(a, True, "recovered")
        back = await stream.read()
        assert {d.health for d in back.devices} == {"Healthy"}
        stream.cancel()

    run_rig(short_dir, body)


def test_registers_again_when_the_kubelet_removes_the_socket(short_dir: Path) -> None:
    async def body(rig: Rig) -> None:
        rig.server.config.socket_path.unlink()  # what a restarting kubelet does
        again = await rig.kubelet.requests.get()
        assert again.endpoint == "gpupool-vgpu.sock"
        assert again.resource_name == "gpupool.io/vgpu"
        # and the plugin serves on the new socket
        async with grpc.aio.insecure_channel(f"unix://{rig.server.config.socket_path}") as ch:
            stub = api_pb2_grpc.DevicePluginStub(ch)  # type: ignore[no-untyped-call]
            stream = stub.ListAndWatch(api_pb2.Empty())
            assert len((await stream.read()).devices) == 6
            stream.cancel()

    run_rig(short_dir, body)


# -- Allocate ----------------------------------------------------------------------------------


def test_allocate_returns_card_limiter_and_limits_file(short_dir: Path) -> None:
    async def body(rig: Rig) -> None:
        _, b = rig.uuids
        rig.source.add(lease(rig, "infer", 1, gib=12, pct=30))
        response = await allocate(rig, f"{b}::2")
        (container,) = response.container_responses
        limits_host = short_dir / "limits" / limits_file_name([f"{b}::2"])
        usage_host = short_dir / "usage" / allocation_key([f"{b}::2"])
        assert dict(container.envs) == {
            "NVIDIA_VISIBLE_DEVICES": b,
            "GPUPOOL_LIMITS_FILE": "/etc/gpupool/limits",
            "GPUPOOL_SHARED_FILE": "/run/gpupool/usage/usage-v2",
            "GPUPOOL_LEASE": "team-a/infer",
            "LD_PRELOAD": "/usr/local/gpupool/lib/libgpupool.so",
        }
        mounts = [(m.container_path, m.host_path, m.read_only) for m in container.mounts]
        assert mounts == [
            ("/usr/local/gpupool/lib/libgpupool.so", str(short_dir / "lib/libgpupool.so"), True),
            ("/etc/gpupool/limits", str(limits_host), True),
            ("/run/gpupool/usage", str(usage_host), False),
        ]
        assert limits_host.read_text() == f"{b} {12 * GiB} 30\n"
        assert stat.S_IMODE(limits_host.stat().st_mode) == 0o644
        # the limiter's accounting folder: the container's own, writable by any of its users
        assert stat.S_IMODE(usage_host.stat().st_mode) == 0o777
        assert rig.source.recorded == [("team-a/infer", (f"{b}::2",))]

        # the same request again: the same answer, recorded once, nothing counted twice
        again = await allocate(rig, f"{b}::2")
        assert again == response
        assert rig.source.recorded == [("team-a/infer", (f"{b}::2",))]
        assert limits_host.read_text() == f"{b} {12 * GiB} 30\n"

    run_rig(short_dir, body)


def test_allocate_mps_and_two_cards(short_dir: Path) -> None:
    async def body(rig: Rig) -> None:
        a, b = rig.uuids
        rig.source.add(lease(rig, "train", 1, 0, gib=70, pct=50, mode="mps"))
        response = await allocate(rig, f"{a}::0", f"{b}::1")
        (container,) = response.container_responses
        envs = dict(container.envs)
        assert envs["NVIDIA_VISIBLE_DEVICES"] == f"{b},{a}"
        assert envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
        assert envs["CUDA_MPS_PIPE_DIRECTORY"] == "/tmp/nvidia-mps"
        mounts = {m.container_path: (m.host_path, m.read_only) for m in container.mounts}
        assert mounts["/tmp/nvidia-mps"] == (str(short_dir / "mps"), False)
        limits = Path(mounts["/etc/gpupool/limits"][0]).read_text()
        assert limits == f"{b} {70 * GiB} 50\n{a} {70 * GiB} 50\n"

    run_rig(short_dir, body)


def test_allocate_waits_for_a_lease_that_trails_the_binding(short_dir: Path) -> None:
    """The extender creates the GpuLease just after the Binding: a lease that arrives while
    Allocate waits (within lease_wait_s) is the one served, not a refusal."""

    async def body(rig: Rig) -> None:
        _, b = rig.uuids

        async def lease_arrives() -> None:
            await asyncio.sleep(0.1)
            rig.source.add(lease(rig, "late", 1))

        arriving = asyncio.ensure_future(lease_arrives())
        response = await allocate(rig, f"{b}::0")
        await arriving
        (container,) = response.container_responses
        assert dict(container.envs)["GPUPOOL_LEASE"] == "team-a/late"
        assert rig.source.recorded == [("team-a/late", (f"{b}::0",))]

    run_rig(short_dir, body)


def test_allocate_refuses_what_it_cannot_honour(short_dir: Path) -> None:
    async def body(rig: Rig) -> None:
        a, b = rig.uuids
        # no lease at all
        err = await allocate_error(rig, f"{a}::0")
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "no gpupool lease on node n1" in (err.details() or "")

        # a lease on an unhealthy card
        rig.source.add(lease(rig, "sick", 0, gib=8))
        rig.inventory.set_health(a, False, "XID 79")
        err = await allocate_error(rig, f"{a}::0")
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "unhealthy" in (err.details() or "")
        rig.source.release("team-a/sick")

        # more than the card can hold next to what it already granted
        rig.source.add(replace(lease(rig, "big", 1, gib=60), device_ids=(f"{b}::0",)))
        rig.source.add(lease(rig, "late", 1, gib=20))
        err = await allocate_error(rig, f"{b}::1")
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "cannot honour 20Gi: 12Gi free of 72Gi" in (err.details() or "")
        assert not (short_dir / "limits" / limits_file_name([f"{b}::1"])).exists()

        # a device that is not ours
        err = await allocate_error(rig, "nvidia0")
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert rig.source.recorded == []

    run_rig(short_dir, body)


def test_preferred_allocation_steers_to_the_waiting_lease(short_dir: Path) -> None:
    async def body(rig: Rig) -> None:
        a, b = rig.uuids
        rig.source.add(lease(rig, "infer", 1))
        request = api_pb2.PreferredAllocationRequest(
            container_requests=[
                api_pb2.ContainerPreferredAllocationRequest(
                    available_deviceIDs=[f"{a}::0", f"{a}::1", f"{b}::0", f"{b}::1"],
                    allocation_size=1,
                )
            ]
        )
        response = await rig.stub.GetPreferredAllocation(request)
        assert [list(c.deviceIDs) for c in response.container_responses] == [[f"{b}::0"]]

    run_rig(short_dir, body)


def test_unexpected_errors_become_statuses_and_the_plugin_keeps_serving(short_dir: Path) -> None:
    async def body(rig: Rig) -> None:
        a, _ = rig.uuids
        err = await allocate_error(rig, f"{a}::0")
        assert err.code() == grpc.StatusCode.INTERNAL
        assert "RuntimeError: lease cache corrupted" in (err.details() or "")
        err = await allocate_error(rig, f"{a}::0")  # still up
        assert err.code() == grpc.StatusCode.INTERNAL
        options = await rig.stub.GetDevicePluginOptions(api_pb2.Empty())
        assert options.get_preferred_allocation_available

    run_rig(short_dir, body, source=BrokenSource())


def test_unwired_lease_source_says_so(short_dir: Path) -> None:
    async def body(rig: Rig) -> None:
        a, _ = rig.uuids
        err = await allocate_error(rig, f"{a}::0")
        assert err.code() == grpc.StatusCode.UNAVAILABLE
        assert "not wired" in (err.details() or "")

    run_rig(short_dir, body, source=UnwiredAllocationSource())


def _on_rigs_cards(rig: Rig, granted: PodLease) -> PodLease:
    """The lease on the fake inventory's cards (node labels name cards GPU-<node>-<i>; the
    fake NVML gives them real-looking uuids): the same cards by index."""
    slices = tuple(replace(s, uuid=rig.uuids[s.gpu_index]) for s in granted.slices)
    return replace(granted, slices=slices)


def test_a_lease_bind_made_with_mps_defaults_gets_the_mps_envs_from_allocate(
    short_dir: Path,
) -> None:
    """The chain the live system runs, without the API server: the extender's bind plans the
    lease (the operators' compute-mode defaults say MPS at 40% for inference pods), writes it
    as GpuLease JSON, the agent's lease source decodes it (`pod_lease`), and Allocate answers
    the container with MPS's environment and pipe mount."""

    async def body(rig: Rig) -> None:
        cache = ClusterCache()
        cache.rebuild([read_node(node_json("n1", cards=2))], [], [])
        modes = read_compute_modes({"inference": "mps: true, activeThreadPercentage: 40"})
        pod = user_pod("infer", namespace="team-a", uid="uid-infer", gpu_memory="12Gi", vgpu=1)
        planned = plan_lease(cache, Planners("binpack").of(None), ScheduledPod.from_json(pod),
                             "n1", [], modes)  # fmt: skip
        assert isinstance(planned, LeaseRecord), planned
        granted = _on_rigs_cards(rig, pod_lease(lease_from_json(lease_to_json(planned))))
        rig.source.add(granted)
        device = f"{granted.card_uuids[0]}::0"
        response = await allocate(rig, device)
        (container,) = response.container_responses
        envs = dict(container.envs)
        assert envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "40"
        assert envs["CUDA_MPS_PIPE_DIRECTORY"] == "/tmp/nvidia-mps"
        mounts = {m.container_path: (m.host_path, m.read_only) for m in container.mounts}
        assert mounts["/tmp/nvidia-mps"] == (str(short_dir / "mps"), False)

        # the same pod under no defaults: a lease without MPS, and no MPS environment
        rig.source.release(granted.lease)
        bare = plan_lease(cache, Planners("binpack").of(None), ScheduledPod.from_json(pod),
                          "n1", [])  # fmt: skip
        assert isinstance(bare, LeaseRecord) and bare.compute_mode == "none"
        rig.source.add(_on_rigs_cards(rig, pod_lease(lease_from_json(lease_to_json(bare)))))
        response = await allocate(rig, device)
        assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in dict(response.container_responses[0].envs)

    run_rig(short_dir, body)


def test_a_plugin_socket_path_over_the_kernels_limit_is_refused_with_its_fix(
    tmp_path: Path,
) -> None:
    """gRPC's own failure names neither the limit nor the flag ("Failed to bind to address"):
    the plugin says both before it binds."""
    config = plugin_config(tmp_path / ("d" * 110), 3)
    server = DevicePluginServer(config, FakeInventory.from_spec("1xA100-80GB", node="n1"),
                                CountingSource())  # fmt: skip
    with pytest.raises(SocketPathTooLong) as err:
        asyncio.run(server.start())
    assert "--device-plugin-dir" in str(err.value) and "at most 107 bytes" in str(err.value)
    assert not config.socket_path.exists()
