"""A stand-in for NVIDIA's container toolkit on the real node: a runc wrapper.

NVIDIA's runtime sits between containerd and runc, and for a container whose environment names
GPUs (NVIDIA_VISIBLE_DEVICES, which gpupool's device plugin sets) it adds the driver's
libraries to the container before runc creates it, showing it only the cards named there. This
does the same with the project's fake CUDA driver and fake NVML (native/build/fake), so that a
container on the real node finds a "driver" where the real one would be, and gpupool's limiter,
mounted by the device plugin, wraps it; FAKE_CUDA_UUIDS tells the fake driver which of the fake
node's cards the container sees (NVIDIA_VISIBLE_DEVICES: the device plugin writes the lease's
card uuids there). Every other call goes to runc unchanged.

It runs as a script (`python -I fake_toolkit.py --runc R --driver-dir D -- RUNC-ARGS`), once per
runc call, so it imports only the standard library.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

# Where the toolkit puts the driver's user-space libraries in a Debian/Ubuntu image.
LIBRARY_DIR = "/usr/lib/x86_64-linux-gnu"
LIBRARIES = ("libcuda.so.1", "libnvidia-ml.so.1")
_NO_GPUS = ("", "void", "none")
# runc's global options that take a value (`runc --root R --log L --log-format json create ...`).
_GLOBAL_WITH_VALUE = ("--root", "--log", "--log-format", "--criu", "--rootless")


def visible_devices(spec: dict[str, Any]) -> str | None:
    """NVIDIA_VISIBLE_DEVICES of the container, None when it names no GPU."""
    for entry in (spec.get("process") or {}).get("env") or []:
        key, _, value = str(entry).partition("=")
        if key == "NVIDIA_VISIBLE_DEVICES":
            return value if value not in _NO_GPUS else None
    return None


def wants_gpus(spec: dict[str, Any]) -> bool:
    return visible_devices(spec) is not None


def add_driver(spec: dict[str, Any], driver_dir: Path) -> dict[str, Any]:
    """The spec with the driver libraries bind-mounted read-only and FAKE_CUDA_UUIDS set to the
    cards NVIDIA_VISIBLE_DEVICES names (once, however often called). `all` (no uuids) leaves
    FAKE_CUDA_UUIDS out: the fake driver then shows its default card 0, as before."""
    mounts = list(spec.get("mounts") or [])
    present = {m.get("destination") for m in mounts}
    for name in LIBRARIES:
        destination = f"{LIBRARY_DIR}/{name}"
        if destination in present:
            continue
        mounts.append(
            {
                "destination": destination,
                "type": "bind",
                "source": str(driver_dir / name),
                "options": ["rbind", "ro", "nosuid", "nodev"],
            }
        )
    process = dict(spec.get("process") or {})
    env = [e for e in process.get("env") or [] if not str(e).startswith("FAKE_CUDA_UUIDS=")]
    visible = visible_devices(spec)
    if visible is not None and visible.startswith("GPU-"):
        env.append(f"FAKE_CUDA_UUIDS={visible}")
    return {**spec, "mounts": mounts, "process": {**process, "env": env}}


def bundle_of(runc_args: list[str]) -> Path | None:
    """The bundle folder of a `create`/`run` call, None for any other call."""
    i = 0
    while i < len(runc_args) and runc_args[i].startswith("-"):
        i += 2 if runc_args[i] in _GLOBAL_WITH_VALUE else 1
    if i >= len(runc_args) or runc_args[i] not in ("create", "run"):
        return None
    rest = runc_args[i + 1 :]
    for j, arg in enumerate(rest):
        if arg in ("--bundle", "-b") and j + 1 < len(rest):
            return Path(rest[j + 1])
        if arg.startswith("--bundle="):
            return Path(arg.split("=", 1)[1])
    return Path.cwd()


def main(argv: list[str]) -> int:
    try:
        split = argv.index("--")
    except ValueError:
        print("usage: fake_toolkit.py --runc R --driver-dir D -- RUNC-ARGS", file=sys.stderr)
        return 2
    own, runc_args = argv[:split], argv[split + 1 :]
    options = dict(zip(own[::2], own[1::2], strict=False))
    runc, driver_dir = options["--runc"], Path(options["--driver-dir"])
    bundle = bundle_of(runc_args)
    if bundle is not None:
        config = bundle / "config.json"
        spec = json.loads(config.read_text())
        if wants_gpus(spec):
            config.write_text(json.dumps(add_driver(spec, driver_dir)))
    os.execv(runc, [runc, *runc_args])
    return 127  # pragma: no cover - execv does not return


if __name__ == "__main__":  # pragma: no cover - run by containerd's shim
    sys.exit(main(sys.argv[1:]))
