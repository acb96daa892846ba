"""The DRA driver's DeviceClass: deploy/dra/deviceclass.yaml, and the chart's with dra.enabled."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from gpupool.adapters.wire.names import DRA_DRIVER
from gpupool.domain.devices import Gpu
from gpupool.node.dra.slices import SliceSettings, resource_slice

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "deploy" / "helm" / "gpupool"
PLAIN = REPO / "deploy" / "dra" / "deviceclass.yaml"


def _template(helm: Path, *args: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [str(helm), "template", "gpupool", str(CHART), "--namespace", "gpupool-system", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def test_the_plain_device_class_selects_the_driver_the_agent_publishes() -> None:
    device_class = yaml.safe_load(PLAIN.read_text())
    assert device_class["apiVersion"] == "resource.k8s.io/v1"
    assert device_class["kind"] == "DeviceClass"
    assert device_class["metadata"]["name"] == DRA_DRIVER
    [selector] = device_class["spec"]["selectors"]
    assert selector["cel"]["expression"] == f'device.driver == "{DRA_DRIVER}"'
    published = resource_slice((Gpu(index=0, model="T4", uuid="GPU-x"),), SliceSettings("n1"), 1)
    assert published["spec"]["driver"] == DRA_DRIVER


def test_the_chart_makes_it_only_when_asked_and_then_the_same_object(helm: Path) -> None:
    assert not [d for d in _template(helm) if d["kind"] == "DeviceClass"]
    [made] = [d for d in _template(helm, "--set", "dra.enabled=true") if d["kind"] == "DeviceClass"]
    assert made == yaml.safe_load(PLAIN.read_text())


def test_a_wrong_dra_value_is_refused_by_the_schema(helm: Path) -> None:
    done = subprocess.run(
        [str(helm), "template", "gpupool", str(CHART), "--set", "dra.enabeld=true"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "enabeld" in done.stderr
