"""The cards' health as the kubelet is told it (node/dra/health.py, the pure part)."""

from __future__ import annotations

from gpupool.domain.devices import Gpu
from gpupool.node.dra.health import DEFAULT_TIMEOUT_S, device_health, report, timeout_for
from gpupool.node.dra.proto import dra_health_pb2

A = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
B = "GPU-bbbbbbbb-0000-0000-0000-000000000000"


def test_every_card_is_reported_in_index_order_the_unhealthy_one_saying_what_to_do() -> None:
    gpus = (Gpu(index=1, model="A100-80GB", uuid=B, healthy=False),
            Gpu(index=0, model="A100-80GB", uuid=A))  # fmt: skip
    health = device_health(gpus)
    assert [(h.device, h.healthy) for h in health] == [("gpu-0", True), ("gpu-1", False)]
    assert health[0].message == ""
    assert B in health[1].message and "delete the pod" in health[1].message


def test_a_reading_is_trusted_for_three_intervals_and_at_least_the_kubelets_default() -> None:
    assert timeout_for(5) == DEFAULT_TIMEOUT_S
    assert timeout_for(20) == 60
    assert timeout_for(10.5) == 32


def test_the_report_names_the_nodes_pool_and_each_device() -> None:
    gpus = (Gpu(index=0, model="A100-80GB", uuid=A), Gpu(index=1, model="A100-80GB", uuid=B,
                                                          healthy=False))  # fmt: skip
    answer = report("node-7", device_health(gpus), now_s=1_700_000_000, timeout_s=45)
    assert [(d.device.pool_name, d.device.device_name, d.health) for d in answer.devices] == [
        ("node-7", "gpu-0", dra_health_pb2.HEALTHY),
        ("node-7", "gpu-1", dra_health_pb2.UNHEALTHY),
    ]
    assert {d.last_updated_time for d in answer.devices} == {1_700_000_000}
    assert {d.health_check_timeout_seconds for d in answer.devices} == {45}
