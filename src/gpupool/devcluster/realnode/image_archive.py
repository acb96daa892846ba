"""Pack files into a one-layer image archive (docker-archive format) that `ctr images import`
loads, for the images the real node runs and no registry here serves: the pause image and the
GPU probe's image (tools/realnode/build-images.sh).

Runs as a script with the standard library only:
    python3 image_archive.py OUT.tar NAME:TAG --entrypoint /pause [--env K=V] [--dir /tmp]
        HOST-FILE=/IMAGE-PATH...
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path

_EPOCH = 0  # fixed mtimes: the same inputs give the same image id


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    info.mtime = _EPOCH
    tar.addfile(info, io.BytesIO(data))


def _dirs(path: str) -> list[str]:
    parts = path.strip("/").split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def _add_dir(tar: tarfile.TarFile, name: str, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = mode
    info.mtime = _EPOCH
    tar.addfile(info)


def layer_tar(files: Mapping[str, Path], dirs: Sequence[str] = ()) -> bytes:
    """A layer holding each host file at its image path (mode kept, parents made) and the
    empty world-writable folders `dirs` (such as /tmp)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for folder in sorted(dirs):
            _add_dir(tar, folder.strip("/"), 0o1777)
        made: set[str] = set()
        for image_path in sorted(files):
            for folder in _dirs(image_path):
                if folder not in made:
                    made.add(folder)
                    _add_dir(tar, folder, 0o755)
            host = files[image_path]
            _add(tar, image_path.strip("/"), host.read_bytes(), host.stat().st_mode & 0o7777)
    return buffer.getvalue()


def image_archive(
    files: Mapping[str, Path],
    name: str,
    *,
    entrypoint: Sequence[str],
    env: Sequence[str] = (),
    dirs: Sequence[str] = (),
) -> bytes:
    """The whole archive: manifest.json, the image config and the one layer."""
    layer = layer_tar(files, dirs)
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": list(entrypoint), "Env": list(env)},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    layer_name = diff_id.removeprefix("sha256:") + "/layer.tar"
    manifest = [{"Config": config_name, "RepoTags": [name], "Layers": [layer_name]}]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        _add(tar, config_name, config_bytes)
        _add(tar, layer_name, layer)
        _add(tar, "manifest.json", json.dumps(manifest).encode())
    return buffer.getvalue()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("name", help="the image reference, e.g. gpupool.dev/pause:local")
    parser.add_argument("--entrypoint", action="append", required=True)
    parser.add_argument("--env", action="append", default=[])
    parser.add_argument("--dir", action="append", default=[], help="an empty folder, mode 1777")
    parser.add_argument("files", nargs="+", metavar="HOST=IMAGE-PATH")
    args = parser.parse_args(argv)
    files = {}
    for item in args.files:
        host, _, image_path = item.partition("=")
        if not image_path.startswith("/"):
            parser.error(f"{item!r}: expected HOST-FILE=/path/in/image")
        files[image_path] = Path(host)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_bytes(
        image_archive(files, args.name, entrypoint=args.entrypoint, env=args.env, dirs=args.dir)
    )
    tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
