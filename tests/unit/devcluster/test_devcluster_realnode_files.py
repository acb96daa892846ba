"""The real node's files, rendered without a host: kubelet, containerd and CNI configuration,
the toolkit stand-in's edit of a runc bundle, the image archives, the agent's card uuids."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml

from gpupool.devcluster.errors import InvalidClusterSpec
from gpupool.devcluster.realnode import configs, fake_toolkit, host, image_archive
from gpupool.devcluster.realnode.fake_gpus import driver_matched_inventory, driver_uuid
from gpupool.devcluster.realnode.layout import NODE_IP, PAUSE_IMAGE, Layout

REPO = Path(__file__).resolve().parents[3]


def test_kubelet_serves_only_authenticated_and_authorized_callers(tmp_path: Path) -> None:
    layout = Layout.under(tmp_path)
    tls = configs.KubeletTls(tmp_path / "ca.crt", tmp_path / "k.crt", tmp_path / "k.key")
    config = yaml.safe_load(
        configs.render_kubelet_configuration(
            configs.kubelet_configuration(layout, tls, port=10250, healthz_port=10248)
        )
    )
    assert config["authentication"]["anonymous"] == {"enabled": False}
    assert config["authentication"]["x509"]["clientCAFile"] == str(tmp_path / "ca.crt")
    assert config["authorization"] == {"mode": "Webhook"}
    assert config["readOnlyPort"] == 0
    assert config["address"] == NODE_IP
    assert config["tlsCertFile"] == str(tmp_path / "k.crt")
    # the field is podLogsDir (a misspelt one would be silently ignored)
    assert config["podLogsDir"].startswith(str(tmp_path))
    assert config["containerRuntimeEndpoint"] == f"unix://{layout.containerd_socket}"


def test_containerd_keeps_to_its_folder_and_uses_the_local_pause_image(tmp_path: Path) -> None:
    layout = Layout.under(tmp_path)
    shim = tmp_path / "bin" / "containerd-shim-runc-v2"
    text = configs.containerd_config(layout, Path("/usr/lib/cni"), shim)
    config = tomllib.loads(text)
    assert config["version"] == 3  # containerd v2's format
    assert config["root"] == str(layout.containerd_root)
    assert config["grpc"]["address"] == str(layout.containerd_socket)
    assert "io.containerd.nri.v1.nri" in config["disabled_plugins"]
    images = config["plugins"]["io.containerd.cri.v1.images"]
    assert images["pinned_images"]["sandbox"] == PAUSE_IMAGE
    runtime = config["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True
    assert runtime["cdi_spec_dirs"] == [str(layout.cdi_spec_dir)]
    assert runtime["cni"]["bin_dirs"] == ["/usr/lib/cni"]
    runc = runtime["containerd"]["runtimes"]["runc"]
    assert runc["runtime_path"] == str(shim)
    assert runc["options"]["BinaryName"] == str(layout.runtime_wrapper)
    assert "/var/lib/containerd" not in text and "/run/containerd" not in text
    assert "/etc/cdi" not in text and "/var/run/cdi" not in text


def test_the_pod_network_changes_no_sysctl_and_adds_no_iptables_rule(tmp_path: Path) -> None:
    [bridge] = json.loads(configs.cni_conflist(Layout.under(tmp_path)))["plugins"]
    assert bridge["isGateway"] is False and bridge["ipMasq"] is False
    assert bridge["ipam"]["dataDir"].startswith(str(tmp_path))


@pytest.mark.parametrize(
    ("argv", "bundle"),
    [
        (["--root", "/run/r", "--log", "/l.json", "--log-format", "json", "create",
          "--bundle", "/b/1", "--pid-file", "/b/1/pid", "id1"], "/b/1"),
        (["create", "--bundle=/b/2", "id2"], "/b/2"),
        (["--root", "/run/r", "start", "id1"], None),
        (["--root", "/run/r", "kill", "id1", "9"], None),
        (["--log", "create", "state", "x"], None),  # 'create' is --log's value here
    ],
)  # fmt: skip
def test_the_toolkit_finds_the_bundle_of_create_calls_only(
    argv: list[str], bundle: str | None
) -> None:
    found = fake_toolkit.bundle_of(argv)
    assert (str(found) if found else None) == bundle


def test_the_toolkit_mounts_the_driver_only_for_gpu_containers(tmp_path: Path) -> None:
    gpu = {"process": {"env": ["PATH=/", "NVIDIA_VISIBLE_DEVICES=GPU-1"]}, "mounts": []}
    plain = {"process": {"env": ["PATH=/"]}, "mounts": []}
    void = {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}}
    assert fake_toolkit.wants_gpus(gpu)
    assert not fake_toolkit.wants_gpus(plain) and not fake_toolkit.wants_gpus(void)
    once = fake_toolkit.add_driver(gpu, tmp_path)
    twice = fake_toolkit.add_driver(once, tmp_path)
    assert twice == once
    mounts = {m["destination"]: m for m in once["mounts"]}
    cuda = mounts["/usr/lib/x86_64-linux-gnu/libcuda.so.1"]
    assert cuda["source"] == str(tmp_path / "libcuda.so.1") and "ro" in cuda["options"]
    assert "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1" in mounts
    # the fake driver shows the container the cards the device plugin named, and only those
    assert once["process"]["env"] == [
        "PATH=/",
        "NVIDIA_VISIBLE_DEVICES=GPU-1",
        "FAKE_CUDA_UUIDS=GPU-1",
    ]


def test_the_toolkit_rewrites_the_bundle_and_runs_runc(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(
        json.dumps({"process": {"env": ["NVIDIA_VISIBLE_DEVICES=all"]}, "mounts": []})
    )
    runc = tmp_path / "runc"
    runc.write_text(f'#!/bin/sh\necho "$@" > {tmp_path / "called"}\n')
    runc.chmod(0o755)
    script = Path(fake_toolkit.__file__)
    args = ["--runc", str(runc), "--driver-dir", "/drv", "--", "create", "--bundle", str(bundle)]
    subprocess.run([sys.executable, "-I", str(script), *args], check=True, timeout=30)
    spec = json.loads((bundle / "config.json").read_text())
    assert [m["source"] for m in spec["mounts"]] == ["/drv/libcuda.so.1", "/drv/libnvidia-ml.so.1"]
    assert (tmp_path / "called").read_text().split() == ["create", "--bundle", str(bundle)]


def test_an_image_archive_names_its_image_and_holds_its_files(tmp_path: Path) -> None:
    program = tmp_path / "pause"
    program.write_bytes(b"\x7fELF fake")
    program.chmod(0o755)
    data = image_archive.image_archive(
        {"/bin/pause": program}, "gpupool.dev/pause:local", entrypoint=["/bin/pause"], dirs=["/tmp"]
    )
    with tarfile.open(fileobj=io.BytesIO(data)) as outer:
        [manifest] = json.loads(_member(outer, "manifest.json"))
        assert manifest["RepoTags"] == ["gpupool.dev/pause:local"]
        config = json.loads(_member(outer, manifest["Config"]))
        assert config["config"]["Entrypoint"] == ["/bin/pause"]
        with tarfile.open(fileobj=io.BytesIO(_member(outer, manifest["Layers"][0]))) as layer:
            members = {m.name: m for m in layer.getmembers()}
    assert members["bin/pause"].mode == 0o755
    assert members["tmp"].isdir() and members["tmp"].mode == 0o1777
    # the same inputs give the same image
    assert (
        image_archive.image_archive(
            {"/bin/pause": program},
            "gpupool.dev/pause:local",
            entrypoint=["/bin/pause"],
            dirs=["/tmp"],
        )
        == data
    )


def _member(tar: tarfile.TarFile, name: str) -> bytes:
    handle = tar.extractfile(name)
    assert handle is not None, name
    return handle.read()


def test_the_agents_card_has_the_uuid_the_fake_driver_reports() -> None:
    for name in ("fake_nvml.c", "fake_cuda.c"):
        source = (REPO / "native" / "tests" / "fake" / name).read_text()
        assert '#define UUID_STEM "GPU-fa4ec0de-0000-0000-0000-0000000000"' in source
        assert "FAKE_CUDA_UUIDS" in source
    cards = driver_matched_inventory("2xA100-80GB", node="real-node-0").devices()
    assert [c.uuid for c in cards] == [driver_uuid(0), driver_uuid(1)]
    assert driver_uuid(1) == "GPU-fa4ec0de-0000-0000-0000-000000000001"
    assert {c.model for c in cards} == {"A100-80GB"}
    with pytest.raises(InvalidClusterSpec, match="8 cards at most"):
        driver_matched_inventory("9xA100-80GB", node="real-node-0")
    assert re.fullmatch(r"GPU-fa4ec0de-(0000-){3}0000000000ff", driver_uuid(255))


def test_the_containerd_version_matches_its_go_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(host.CONTAINERD_BIN_ENV, raising=False)
    go_mod = (REPO / "tools" / "realnode" / "containerd" / "go.mod").read_text()
    match = re.search(r"^require github\.com/containerd/containerd/v2 (v\S+)$", go_mod, re.M)
    assert match, "containerd/v2 not required in tools/realnode/containerd/go.mod"
    assert match.group(1) == host.CONTAINERD_VERSION
    assert host.containerd_bin_dir().parent.name == f"containerd-{host.CONTAINERD_VERSION}"


def test_the_agent_with_dra_registers_where_the_kubelet_looks_and_writes_where_containerd_reads(
    tmp_path: Path,
) -> None:
    """`RealNodeSpec.dra`: the agent's DRA flags name the kubelet's plugin folders under its own
    --root-dir (the plugin watcher's folder is not a fixed host folder, unlike device-plugins),
    the CDI folder containerd is configured with, and a checkpoint folder of the node's own;
    `gpupool dev-cluster agent` accepts them. Without `dra` the agent gets none of them."""
    from gpupool.cli.main import build_parser
    from gpupool.devcluster.nodes import parse_gpu_spec
    from gpupool.devcluster.realnode.node import RealNode, RealNodeSpec

    tools = host.HostTools(*(Path("/nonexistent") for _ in range(5)))
    spec = RealNodeSpec(gpus=parse_gpu_spec("1xA100-80GB"), dra=True)
    node = RealNode(tmp_path, tmp_path / "pki", "https://127.0.0.1:6443", tools, Path("k"), spec)
    flags = node._dra_argv()
    layout = Layout.under(tmp_path)
    kubelet = configs.kubelet_argv(Path("kubelet"), layout, node="n", labels={})
    [root_dir] = [a.split("=", 1)[1] for a in kubelet if a.startswith("--root-dir=")]
    runtime = tomllib.loads(configs.containerd_config(layout, Path("/cni"), Path("/shim")))[
        "plugins"
    ]["io.containerd.cri.v1.runtime"]

    args = build_parser("dev-cluster").parse_args(
        ["dev-cluster", "agent", "--node-name", "n", "--fake-gpus", "1xA100-80GB", *flags]
    )
    assert args.dra is True
    assert args.kubelet_registry_dir == Path(root_dir) / "plugins_registry"
    assert args.kubelet_plugins_dir == Path(root_dir) / "plugins"
    assert [args.cdi_dir] == runtime["cdi_spec_dirs"]
    assert args.dra_state_dir.is_relative_to(layout.root)
    without = RealNode(tmp_path, tmp_path, "https://x", tools, Path("k"), RealNodeSpec(spec.gpus))
    assert without._dra_argv() == []
