"""The pure side of the device plugin: virtual devices, preferred allocation, Allocate verdicts."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupool.domain.allocations import Slice
from gpupool.domain.devices import Gpu
from gpupool.domain.errors import InvalidRequest
from gpupool.domain.units import GiB
from gpupool.node.device_plugin.decide import (
    Grant,
    MountSpec,
    PluginPaths,
    Refusal,
    allocation_key,
    decide_allocation,
    limits_file_name,
    limits_text,
)
from gpupool.node.device_plugin.devices import (
    card_of,
    device_id,
    preferred_devices,
    virtual_devices,
)
from gpupool.ports import PodLease

A = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
B = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
C = "GPU-cccccccc-0000-0000-0000-000000000000"
GPUS = (
    Gpu(index=0, model="A100-80GB", uuid=A, numa_node=0),
    Gpu(index=1, model="A100-80GB", uuid=B, numa_node=0),
    Gpu(index=2, model="T4", uuid=C, numa_node=1),
)
PATHS = PluginPaths(limits_host_dir="/host/limits")


def piece(uuid: str, gib: int, compute_pct: int = 0, model: str = "A100-80GB") -> Slice:
    index = {A: 0, B: 1, C: 2}.get(uuid, 9)
    return Slice(index, uuid, model, 0, gib * GiB, compute_pct * 10)


def lease(
    name: str,
    *slices: Slice,
    mode: str | None = None,
    devices: tuple[str, ...] = (),
    node: str = "n1",
) -> PodLease:
    return PodLease(
        lease=f"team/{name}",
        pod=f"team/{name}",
        pod_uid=f"uid-{name}",
        node=node,
        slices=slices,
        compute_mode=mode,
        device_ids=devices,
    )


def decide(device_ids: list[str], leases: list[PodLease], gpus: tuple[Gpu, ...] = GPUS) -> object:
    return decide_allocation(
        node="n1", device_ids=device_ids, gpus=gpus, leases=leases, reserve_pct=10, paths=PATHS
    )


# -- virtual devices -------------------------------------------------------------------------


def test_virtual_devices_name_their_card_and_carry_health() -> None:
    gpus = (GPUS[1], replace(GPUS[0], healthy=False))
    devices = virtual_devices(gpus, per_card=3)
    assert [d.id for d in devices] == [f"{u}::{slot}" for u in (A, B) for slot in range(3)]
    assert [d.healthy for d in devices] == [False] * 3 + [True] * 3
    assert all(card_of(d.id) == d.card_uuid for d in devices)
    assert all(len(d.id) <= 63 for d in devices)


@pytest.mark.parametrize("bad", ["", "GPU-a", "GPU-a::", "::3", "GPU-a::x", "nvidia0"])
def test_card_of_rejects_foreign_ids(bad: str) -> None:
    with pytest.raises(InvalidRequest):
        card_of(bad)


def test_device_ids_respect_the_kubelet_length_limit() -> None:
    with pytest.raises(InvalidRequest):
        device_id("GPU-" + "x" * 60, 1)
    with pytest.raises(InvalidRequest):
        virtual_devices(GPUS, per_card=0)


# -- preferred allocation --------------------------------------------------------------------

AVAILABLE = [f"{A}::0", f"{A}::1", f"{B}::0", f"{B}::1", f"{C}::0"]


@pytest.mark.parametrize(
    ("must", "size", "awaiting", "expected"),
    [
        # no lease to steer by: distinct cards first
        ([], 2, [], [f"{A}::0", f"{B}::0"]),
        ([], 1, [], [f"{A}::0"]),
        ([f"{B}::1"], 2, [], [f"{B}::1", f"{A}::0"]),
        # more than there are cards: fill from any
        ([], 4, [], [f"{A}::0", f"{B}::0", f"{C}::0", f"{A}::1"]),
        # steer to the waiting lease's card
        ([], 1, [lease("p", piece(C, 4, model="T4"))], [f"{C}::0"]),
        ([], 2, [lease("p", piece(C, 4, model="T4"), piece(B, 4))], [f"{C}::0", f"{B}::0"]),
        # a lease of another size does not steer
        ([], 1, [lease("p", piece(C, 4), piece(B, 4))], [f"{A}::0"]),
        # a lease whose card has nothing available does not steer
        ([], 1, [lease("p", piece("GPU-gone", 4))], [f"{A}::0"]),
        ([], 0, [], []),
    ],
)
def test_preferred_devices(
    must: list[str], size: int, awaiting: list[PodLease], expected: list[str]
) -> None:
    assert list(preferred_devices(AVAILABLE, must, size, awaiting)) == expected


# -- limits file -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("slices", "text"),
    [
        ([piece(A, 12)], f"{A} {12 * GiB}\n"),
        ([piece(A, 12, 30)], f"{A} {12 * GiB} 30\n"),
        ([piece(B, 80, 100), piece(A, 80, 100)], f"{B} {80 * GiB} 100\n{A} {80 * GiB} 100\n"),
    ],
)
def test_limits_text(slices: list[Slice], text: str) -> None:
    assert limits_text(slices) == text


def test_limits_file_name_depends_on_the_devices_only() -> None:
    assert limits_file_name([f"{A}::1", f"{B}::0"]) == limits_file_name([f"{B}::0", f"{A}::1"])
    assert limits_file_name([f"{A}::1"]) != limits_file_name([f"{A}::2"])
    assert limits_file_name([f"{A}::1"]).endswith(".limits")


# -- Allocate verdicts -----------------------------------------------------------------------


def test_grant_for_a_waiting_lease() -> None:
    waiting = lease("p", piece(A, 12, 30))
    verdict = decide([f"{A}::3"], [waiting, lease("q", piece(B, 8))])
    assert isinstance(verdict, Grant)
    assert verdict.lease == waiting
    assert not verdict.already_recorded
    assert verdict.limits_text == f"{A} {12 * GiB} 30\n"
    assert verdict.limits_host_path == f"/host/limits/{limits_file_name([f'{A}::3'])}"
    assert verdict.envs == {
        "NVIDIA_VISIBLE_DEVICES": A,
        "GPUPOOL_LIMITS_FILE": "/etc/gpupool/limits",
        "GPUPOOL_SHARED_FILE": "/run/gpupool/usage/usage-v2",
        "GPUPOOL_LEASE": "team/p",
        "LD_PRELOAD": "/usr/local/gpupool/lib/libgpupool.so",
    }
    # the limiter's accounting: a writable folder of this container's own, named as its limits
    assert verdict.usage_host_path == f"/var/lib/gpupool/usage/{allocation_key([f'{A}::3'])}"
    assert verdict.mounts == (
        MountSpec(
            "/usr/local/gpupool/lib/libgpupool.so", "/usr/local/lib/gpupool/libgpupool.so", True
        ),
        MountSpec("/etc/gpupool/limits", verdict.limits_host_path, True),
        MountSpec("/run/gpupool/usage", verdict.usage_host_path, False),
    )


def test_grant_for_mps_and_ld_so_preload() -> None:
    waiting = lease("p", piece(A, 12, 30), mode="mps")
    paths = replace(PATHS, preload="file", ld_so_preload_host="/host/preload")
    verdict = decide_allocation(
        node="n1", device_ids=[f"{A}::0"], gpus=GPUS, leases=[waiting], reserve_pct=10, paths=paths
    )
    assert isinstance(verdict, Grant)
    assert "LD_PRELOAD" not in verdict.envs
    assert verdict.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"
    assert verdict.envs["CUDA_MPS_PIPE_DIRECTORY"] == "/tmp/nvidia-mps"
    assert MountSpec("/etc/ld.so.preload", "/host/preload", True) in verdict.mounts
    assert MountSpec("/tmp/nvidia-mps", "/tmp/nvidia-mps", False) in verdict.mounts


def test_mps_without_compute_cap_gets_the_whole_card() -> None:
    verdict = decide([f"{A}::0"], [lease("p", piece(A, 12), mode="mps")])
    assert isinstance(verdict, Grant)
    assert verdict.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "100"


def test_two_gpus_in_the_lease_order() -> None:
    waiting = lease("p", piece(B, 70, 100), piece(A, 70, 100))
    verdict = decide([f"{A}::0", f"{B}::4"], [waiting])
    assert isinstance(verdict, Grant)
    assert verdict.envs["NVIDIA_VISIBLE_DEVICES"] == f"{B},{A}"
    assert verdict.limits_text == f"{B} {70 * GiB} 100\n{A} {70 * GiB} 100\n"


def test_repeated_allocate_gets_the_same_answer_and_is_not_counted_twice() -> None:
    waiting = lease("p", piece(A, 60))
    first = decide([f"{A}::0"], [waiting])
    assert isinstance(first, Grant)
    bound = replace(waiting, device_ids=(f"{A}::0",))
    # 60 GiB of 72 allocatable: a second count of the same lease would not fit
    again = decide([f"{A}::0"], [bound])
    assert isinstance(again, Grant)
    assert again.already_recorded
    assert (again.envs, again.mounts, again.limits_text, again.limits_host_path) == (
        first.envs,
        first.mounts,
        first.limits_text,
        first.limits_host_path,
    )


def test_equivalent_waiting_leases_take_the_first_by_name() -> None:
    verdict = decide([f"{A}::0"], [lease("q", piece(A, 8)), lease("p", piece(A, 8))])
    assert isinstance(verdict, Grant)
    assert verdict.lease.lease == "team/p"


@pytest.mark.parametrize(
    ("device_ids", "leases", "gpus", "code", "words"),
    [
        ([f"{A}::0"], [], GPUS, "FAILED_PRECONDITION", ["no gpupool lease on node n1", A]),
        (
            [f"{A}::0"],
            [lease("p", piece(B, 8))],
            GPUS,
            "FAILED_PRECONDITION",
            ["no gpupool lease", "team/p (pod team/p) on " + B],
        ),
        (["nvidia0"], [lease("p", piece(A, 8))], GPUS, "INVALID_ARGUMENT", ["nvidia0"]),
        ([], [lease("p", piece(A, 8))], GPUS, "INVALID_ARGUMENT", ["no devices"]),
        (
            [f"{A}::0", f"{A}::1"],
            [lease("p", piece(A, 8), piece(B, 8))],
            GPUS,
            "FAILED_PRECONDITION",
            ["only 1 card", "different card"],
        ),
        # the card went unhealthy after placement
        (
            [f"{A}::0"],
            [lease("p", piece(A, 8))],
            (replace(GPUS[0], healthy=False), *GPUS[1:]),
            "FAILED_PRECONDITION",
            ["unhealthy", A],
        ),
        # the card is not here any more
        (
            [f"{A}::0"],
            [lease("p", piece(A, 8))],
            GPUS[1:],
            "FAILED_PRECONDITION",
            ["not on this node"],
        ),
        # the card has the memory only if the reserve is ignored: 72 GiB allocatable of 80
        (
            [f"{A}::0"],
            [lease("p", piece(A, 73))],
            GPUS,
            "FAILED_PRECONDITION",
            ["cannot honour 73Gi", "72Gi free of 72Gi", "10% of 80Gi", "out of memory"],
        ),
        # other pods already hold most of it
        (
            [f"{A}::0"],
            [lease("p", piece(A, 30)), lease("q", piece(A, 50), devices=(f"{A}::9",))],
            GPUS,
            "FAILED_PRECONDITION",
            ["22Gi free of 72Gi", "50Gi granted to other pods"],
        ),
        # the lease expects another model
        (
            [f"{C}::0"],
            [lease("p", piece(C, 4, model="L4"))],
            GPUS,
            "FAILED_PRECONDITION",
            ["is a T4, not the L4"],
        ),
        # two leases wait on the card and differ: refuse to guess
        (
            [f"{A}::0"],
            [lease("p", piece(A, 8)), lease("q", piece(A, 16))],
            GPUS,
            "FAILED_PRECONDITION",
            ["refusing to guess", "team/p", "team/q"],
        ),
        # lease of 2 GPUs, container given the devices of only one of them
        (
            [f"{A}::0"],
            [
                lease("p", piece(A, 8), piece(B, 8)),
                lease("q", piece(A, 8), mode="mps", devices=(f"{A}::0", f"{B}::0")),
            ],
            GPUS,
            "FAILED_PRECONDITION",
            ["no gpupool lease"],
        ),
    ],
)
def test_refusals(
    device_ids: list[str],
    leases: list[PodLease],
    gpus: tuple[Gpu, ...],
    code: str,
    words: list[str],
) -> None:
    verdict = decide(device_ids, leases, gpus)
    assert isinstance(verdict, Refusal)
    assert verdict.code == code
    for word in words:
        assert word in verdict.message


def test_memory_granted_to_others_counts_only_recorded_leases() -> None:
    # q waits too (no devices yet): it is not yet on the card, so p fits
    leases = [lease("p", piece(A, 40)), lease("q", piece(A, 40), mode="mps")]
    verdict = decide([f"{A}::0"], leases)
    assert isinstance(verdict, Refusal)  # two different leases wait: no guessing
    leases = [lease("p", piece(A, 40)), lease("q", piece(A, 40), devices=(f"{A}::5",))]
    verdict = decide([f"{A}::0"], leases)
    assert isinstance(verdict, Refusal)
    assert "32Gi free" in verdict.message
