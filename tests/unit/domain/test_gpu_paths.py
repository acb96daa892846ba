"""The decision on other paths handing out a node's cards (domain.gpu_paths): another device
plugin's resource or another DRA driver's GPUs refuse the node, with a message naming the path
and what to do; gpupool's own two paths, a NIC's driver, a plugin gone to zero do not."""

from __future__ import annotations

from gpupool.domain.gpu_paths import PathKind, PublishedSlice, find_paths

OWN = ("gpupool.io/vgpu",)
DRIVER = "gpu.gpupool.io"
CARDS = ("GPU-a", "GPU-b")


def test_gpupools_device_plugin_alone_is_not_refused() -> None:
    found = find_paths("n1", {"gpupool.io/vgpu": 80, "example.com/nic": 2}, (),
                       own_resources=OWN, own_driver=DRIVER,
                       gpu_resource_prefixes=("nvidia.com/",))  # fmt: skip
    assert not found.refused and found.others == ()
    assert found.own.device_plugin and not found.own.dra
    assert "only gpupool hands out the cards of node n1" in found.message()


def test_nvidias_device_plugin_beside_gpupools_refuses_the_node_and_says_what_to_do() -> None:
    found = find_paths("n1", {"gpupool.io/vgpu": 80, "nvidia.com/gpu": 8}, (),
                       own_resources=OWN, own_driver=DRIVER,
                       gpu_resource_prefixes=("nvidia.com/",))  # fmt: skip
    assert found.refused
    [other] = found.others
    assert (other.kind, other.name, other.amount) == (PathKind.DEVICE_PLUGIN, "nvidia.com/gpu", 8)
    message = found.message()
    assert "device plugin resource nvidia.com/gpu (8 on the Node)" in message
    assert "nvidia.com/gpu.deploy.device-plugin=false" in message
    assert "places no new pod or claim here" in message


def test_hamis_and_mig_resources_are_other_paths_too() -> None:
    found = find_paths("n1", {"nvidia.com/gpumem": 81920, "nvidia.com/mig-1g.10gb": 7}, (),
                       own_resources=OWN, own_driver=DRIVER,
                       gpu_resource_prefixes=("nvidia.com/",))  # fmt: skip
    assert [o.name for o in found.others] == ["nvidia.com/gpumem", "nvidia.com/mig-1g.10gb"]


def test_a_device_plugin_gone_to_zero_is_no_path() -> None:
    found = find_paths("n1", {"gpupool.io/vgpu": 80, "nvidia.com/gpu": 0}, (),
                       own_resources=OWN, own_driver=DRIVER,
                       gpu_resource_prefixes=("nvidia.com/",))  # fmt: skip
    assert not found.refused


def test_another_dra_driver_naming_this_nodes_cards_refuses_the_node() -> None:
    theirs = PublishedSlice("n1-gpu.nvidia.com", "gpu.nvidia.com", 2, frozenset(CARDS))
    found = find_paths("n1", {}, (theirs,), own_resources=OWN, own_driver=DRIVER,
                       gpu_resource_prefixes=("nvidia.com/",), card_uuids=CARDS)  # fmt: skip
    assert found.refused
    [other] = found.others
    assert (other.kind, other.name, other.amount) == (PathKind.DRA_DRIVER, "gpu.nvidia.com", 2)
    assert other.slices == ("n1-gpu.nvidia.com",)
    assert "DRA driver gpu.nvidia.com (2 device(s) in ResourceSlice n1-gpu.nvidia.com)" in (
        found.message()
    )
    assert "stop the other DRA driver's kubelet plugin" in found.message()


def test_a_driver_naming_no_uuid_counts_when_its_name_says_gpu() -> None:
    hami = PublishedSlice("n1-hami", "hami-core-gpu.project-hami.io", 8)
    nic = PublishedSlice("n1-nic", "dra.net", 4)
    found = find_paths("n1", {}, (hami, nic), own_resources=OWN, own_driver=DRIVER,
                       gpu_resource_prefixes=("nvidia.com/",), card_uuids=CARDS)  # fmt: skip
    assert [o.name for o in found.others] == ["hami-core-gpu.project-hami.io"]


def test_a_gpu_driver_whose_devices_name_other_cards_is_not_this_nodes_path() -> None:
    elsewhere = PublishedSlice("n1-x", "gpu.example.com", 1, frozenset({"GPU-zzz"}))
    found = find_paths("n1", {}, (elsewhere,), own_resources=OWN, own_driver=DRIVER,
                       gpu_resource_prefixes=("nvidia.com/",), card_uuids=CARDS)  # fmt: skip
    assert not found.refused


def test_gpupools_own_two_paths_are_not_refused_and_say_they_book_through_leases() -> None:
    ours = PublishedSlice("n1-gpu.gpupool.io", DRIVER, 2, frozenset(CARDS))
    found = find_paths("n1", {"gpupool.io/vgpu": 20}, (ours,), own_resources=OWN,
                       own_driver=DRIVER, gpu_resource_prefixes=("nvidia.com/",),
                       card_uuids=CARDS)  # fmt: skip
    assert not found.refused and found.own.both
    assert "both booking through GpuLeases" in found.message()


def test_both_kinds_of_other_path_are_named_with_both_fixes() -> None:
    theirs = PublishedSlice("s", "gpu.nvidia.com", 2, frozenset(CARDS))
    found = find_paths("n1", {"nvidia.com/gpu": 8}, (theirs,), own_resources=OWN,
                       own_driver=DRIVER, gpu_resource_prefixes=("nvidia.com/",),
                       card_uuids=CARDS)  # fmt: skip
    assert found.kinds == {PathKind.DEVICE_PLUGIN, PathKind.DRA_DRIVER}
    assert "nvidia.com/gpu.deploy.device-plugin=false" in found.message()
    assert "stop the other DRA driver's kubelet plugin" in found.message()
