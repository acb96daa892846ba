"""The DRA driver's DeviceClass: deploy/dra/deviceclass.yaml, and the chart's with dra.enabled."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from gpupool.adapters.wire.names import DRA_DRIVER
from gpupool.cli.main import build_parser
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


def _agent(docs: list[dict[str, Any]]) -> dict[str, Any]:
    [daemonset] = [
        d for d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "gpupool-agent"
    ]
    spec: dict[str, Any] = daemonset["spec"]["template"]["spec"]
    return spec


def _agent_rules(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    [role] = [
        d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "gpupool-agent"
    ]
    rules: list[dict[str, Any]] = role["rules"]
    return rules


def test_without_dra_the_agent_has_neither_the_flag_nor_the_access(helm: Path) -> None:
    docs = _template(helm)
    assert "--dra" not in _agent(docs)["containers"][0]["args"]
    # only list and watch of ResourceSlices, to find another DRA driver on its node (gpu_paths)
    dra_rules = [r for r in _agent_rules(docs) if "resource.k8s.io" in r["apiGroups"]]
    assert dra_rules == [
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceslices"],
            "verbs": ["list", "watch"],
        }
    ]


def test_with_dra_the_agent_runs_the_driver_with_its_folders_and_access(helm: Path) -> None:
    docs = _template(helm, "--set", "dra.enabled=true")
    spec = _agent(docs)
    container = spec["containers"][0]
    args = build_parser().parse_args(container["args"])  # gpupool's own parser takes them
    assert args.dra is True
    assert args.dra_state_dir == Path("/var/lib/gpupool/dra")
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    host = {v["name"]: v.get("hostPath", {}).get("path") for v in spec["volumes"]}
    # each folder the kubelet or the runtime reads is mounted at its host path
    for name, path in (
        ("kubelet-plugins", str(args.kubelet_plugins_dir)),
        ("kubelet-registry", str(args.kubelet_registry_dir)),
        ("cdi", args.cdi_dir),
    ):
        assert mounts[name] == host[name] == path
    assert args.dra_state_dir.is_relative_to(mounts["state"])
    rules = {
        (r["apiGroups"][0], r["resources"][0]): set(r["verbs"])
        for r in _agent_rules(docs)
        if r["apiGroups"] == ["resource.k8s.io"]
    }
    assert rules == {
        ("resource.k8s.io", "resourceslices"): {"get", "create", "update", "delete"},
        ("resource.k8s.io", "resourceclaims"): {"get"},
    }
