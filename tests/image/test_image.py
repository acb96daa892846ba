"""The image, built for real: tools/image/build.sh (buildah on a local mmdebstrap Debian base, no
registry) makes the OCI archive the real node imports, and containers from it do what the chart
asks of them: every component's command starts, and the agent's init container installs the
limiter on the host as the DaemonSet runs it (same script, same user, a host folder mounted).

Skipped where the build cannot run (not root, no buildah, mmdebstrap or runc); a first build
takes minutes (the base, PyPI wheels, the limiter), later ones nothing while the inputs hold.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = [pytest.mark.image, pytest.mark.host, pytest.mark.timeout(2400)]

REPO = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
IMAGE = f"gpupool:{VERSION}"
AGENT = REPO / "deploy" / "install" / "agent.yaml"


@pytest.fixture(scope="module")
def archive() -> Path:
    missing = [t for t in ("buildah", "mmdebstrap", "runc") if shutil.which(t) is None]
    if os.geteuid() != 0 or missing:
        pytest.skip(
            f"the image build needs root and buildah, mmdebstrap, runc (missing: {missing})"
        )
    built = subprocess.run(
        [str(REPO / "tools" / "image" / "build.sh")], capture_output=True, text=True, timeout=2400
    )
    assert built.returncode == 0, built.stderr[-4000:]
    return Path(built.stdout.strip().splitlines()[-1])


def _blob(tar: tarfile.TarFile, digest: str) -> Any:
    algorithm, hex_digest = digest.split(":")
    member = tar.extractfile(f"blobs/{algorithm}/{hex_digest}")
    assert member is not None
    return json.load(member)


def test_the_archive_holds_the_image_the_chart_names(archive: Path) -> None:
    with tarfile.open(archive) as tar:
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
        [entry] = index["manifests"]
        config = _blob(tar, _blob(tar, entry["digest"])["config"]["digest"])["config"]
    # containerd names it docker.io/library/gpupool:VERSION on import: what the chart's pods use.
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == IMAGE
    chart = yaml.safe_load((REPO / "deploy" / "helm" / "gpupool" / "Chart.yaml").read_text())
    assert chart["appVersion"] == VERSION
    assert config["Entrypoint"] == ["gpupool"]
    assert config["User"] == "65532:65532"  # the chart's runAsUser for the services
    # The label is the inputs' hash the archive is named after: a rebuild key, not a guess.
    assert archive.name == f"gpupool-{VERSION}-{config['Labels']['gpupool.io/source']}.oci.tar"


@pytest.fixture(scope="module")
def run(archive: Path) -> Iterator[Any]:
    """Runs a command in a fresh container of the image (buildah run, runc, no network)."""
    storage = archive.parent / "storage"
    bah = ["buildah", "--root", str(storage / "root"), "--runroot", str(storage / "run")]
    made: list[str] = []

    def in_container(*argv: str, user: str = "", mounts: tuple[str, ...] = ()) -> str:
        ctr = subprocess.run(
            [*bah, "from", "--pull=never", IMAGE], capture_output=True, text=True, check=True
        ).stdout.strip()
        made.append(ctr)
        flags = [f"--user={user}"] if user else []
        done = subprocess.run(
            [*bah, "run", "--runtime", shutil.which("runc") or "runc", "--network", "none",
             *flags, *[f"-v={m}" for m in mounts], ctr, "--", *argv],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, f"{argv}: {done.stderr[-2000:]}"
        return done.stdout

    yield in_container
    for ctr in made:
        subprocess.run([*bah, "rm", ctr], capture_output=True, check=False)


@pytest.mark.parametrize("command", [["agent"], ["controller"], ["extender"], ["webhook", "serve"]])
def test_every_components_command_starts_in_the_image(run: Any, command: list[str]) -> None:
    # Its whole import graph loads (grpc, NVML bindings, aiohttp, lightkube...) as the image's user.
    assert "usage: gpupool" in run("gpupool", *command, "--help")


def test_the_agents_init_container_installs_the_limiter_where_the_chart_says(
    run: Any, tmp_path: Path
) -> None:
    [daemonset] = [d for d in yaml.safe_load_all(AGENT.read_text()) if d]
    [init] = daemonset["spec"]["template"]["spec"]["initContainers"]
    [mount] = init["volumeMounts"]
    assert init["securityContext"]["runAsUser"] == 0
    run(*init["command"], *init["args"], user="0:0", mounts=(f"{tmp_path}:{mount['mountPath']}",))
    installed = tmp_path / "libgpupool.so"
    assert installed.read_bytes()[:4] == b"\x7fELF"
    assert [p.name for p in tmp_path.iterdir()] == ["libgpupool.so"]  # no temporary left
    # ... the very file `gpupool limiter path` finds in the image.
    assert run("gpupool", "limiter", "path").strip() == "/usr/local/lib/gpupool/libgpupool.so"
