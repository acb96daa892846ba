"""A claim's CDI spec: the device plugin's envs and mounts at the spec level, a device per card,
and the spec read back from its text."""

from __future__ import annotations

import json

import pytest

from gpupool.adapters.wire.names import DRA_CDI_KIND
from gpupool.node.device_plugin.decide import MountSpec
from gpupool.node.dra.cdi import (
    CdiDevice,
    InvalidCdiSpec,
    cdi_device_name,
    claim_spec,
    read_spec,
    render,
    spec_file_name,
)

UID = "0b6f8d7e-1c1e-4a4e-9f3a-5d3c2b1a0f9e"
ENVS = {"NVIDIA_VISIBLE_DEVICES": "GPU-a", "LD_PRELOAD": "/usr/local/gpupool/lib/libgpupool.so"}
MOUNTS = (
    MountSpec("/etc/gpupool/limits", "/var/lib/gpupool/limits/x.limits", True),
    MountSpec("/run/gpupool/usage", "/var/lib/gpupool/usage/x", False),
)


def test_the_spec_carries_the_claims_edits_once_and_a_device_per_card() -> None:
    device = CdiDevice(cdi_device_name(UID, "gpu-0"), "gpu-0", "GPU-a")
    spec = claim_spec((device,), ENVS, MOUNTS)
    assert spec["cdiVersion"] == "0.6.0"
    assert spec["kind"] == DRA_CDI_KIND == "gpu.gpupool.io/claim"
    assert spec["containerEdits"] == {
        "env": [
            "NVIDIA_VISIBLE_DEVICES=GPU-a",
            "LD_PRELOAD=/usr/local/gpupool/lib/libgpupool.so",
        ],
        "mounts": [
            {
                "hostPath": "/var/lib/gpupool/limits/x.limits",
                "containerPath": "/etc/gpupool/limits",
                "options": ["ro", "nosuid", "nodev", "bind"],
            },
            {
                "hostPath": "/var/lib/gpupool/usage/x",
                "containerPath": "/run/gpupool/usage",
                "options": ["rw", "nosuid", "nodev", "bind"],
            },
        ],
    }
    assert spec["devices"] == [
        {"name": f"{UID}-gpu-0", "containerEdits": {"env": ["GPUPOOL_DRA_GPU_0=GPU-a"]}}
    ]
    assert device.qualified == f"gpu.gpupool.io/claim={UID}-gpu-0"


def test_the_file_name_is_the_cdi_librarys_transient_name() -> None:
    assert spec_file_name(UID) == f"gpu.gpupool.io-claim_{UID}.json"


def test_a_written_spec_reads_back_as_written() -> None:
    devices = (
        CdiDevice(cdi_device_name(UID, "gpu-0"), "gpu-0", "GPU-a"),
        CdiDevice(cdi_device_name(UID, "gpu-1"), "gpu-1", "GPU-b"),
    )
    back = read_spec(render(claim_spec(devices, ENVS, MOUNTS)), "spec.json")
    assert back.device_names == (f"{UID}-gpu-0", f"{UID}-gpu-1")
    assert back.envs == ENVS
    assert back.mounts == MOUNTS


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not a gpupool CDI spec"),
        (json.dumps({"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu", "devices": []}), "kind"),
        (json.dumps({"cdiVersion": "0.6.0", "kind": DRA_CDI_KIND, "devices": []}), "no devices"),
        (
            json.dumps(
                {"cdiVersion": "0.6.0", "kind": DRA_CDI_KIND, "devices": [{"name": "bad name"}]}
            ),
            "device names CDI does not allow: bad name",
        ),
    ],
)
def test_a_spec_that_is_not_gpupools_is_refused_naming_the_file(text: str, message: str) -> None:
    with pytest.raises(InvalidCdiSpec, match=message) as raised:
        read_spec(text, "/var/run/cdi/x.json")
    assert "/var/run/cdi/x.json" in str(raised.value)


def test_names_cdi_would_refuse_are_refused_before_writing() -> None:
    with pytest.raises(InvalidCdiSpec, match="characters CDI does not allow"):
        cdi_device_name("uid with space", "gpu-0")
    with pytest.raises(InvalidCdiSpec, match="at least one device"):
        claim_spec((), ENVS, MOUNTS)
