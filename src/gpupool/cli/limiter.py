"""`gpupool limiter path`: where the built in-container limiter (libgpupool.so) is.

The node agent mounts this file into GPU containers and preloads it; operators use the command
to find what to mount or copy into an image. Looked up in order: $GPUPOOL_LIMITER (an explicit
override, which must exist), the source checkout's `native/build/`, then the install locations
`/usr/local/lib/gpupool/` and `/usr/lib/gpupool/`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

LIBRARY = "libgpupool.so"
ENV = "GPUPOOL_LIMITER"
REPO_ROOT = Path(__file__).resolve().parents[3]
BUILT = REPO_ROOT / "native" / "build" / LIBRARY
INSTALLED = (Path("/usr/local/lib/gpupool") / LIBRARY, Path("/usr/lib/gpupool") / LIBRARY)


class LimiterNotFound(Exception):
    """The limiter library is not where it should be; the message says how to get it."""


def limiter_path(
    environ: Mapping[str, str] | None = None,
    candidates: Sequence[Path] = (BUILT, *INSTALLED),
) -> Path:
    """The absolute path of libgpupool.so, or LimiterNotFound saying how to build it."""
    env = os.environ if environ is None else environ
    override = env.get(ENV, "")
    if override:
        path = Path(override).expanduser().absolute()
        if path.is_file():
            return path
        raise LimiterNotFound(f"{ENV}={override} does not name a file")
    for path in candidates:
        if path.is_file():
            return path.absolute()
    looked = ", ".join(str(p) for p in candidates)
    raise LimiterNotFound(
        f"{LIBRARY} is not built (looked in {looked}); build it with `make native` in "
        f"{REPO_ROOT} (needs make and a C compiler), or set {ENV} to its path"
    )


def _path(_args: argparse.Namespace) -> int:
    try:
        print(limiter_path())
    except LimiterNotFound as exc:
        print(f"gpupool limiter path: {exc}", file=sys.stderr)
        return 1
    return 0


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Adds `gpupool limiter path`."""
    parser = subparsers.add_parser(
        "limiter",
        help="the in-container GPU memory limiter (libgpupool)",
        description="The in-container GPU memory limiter, libgpupool (see native/README.md).",
    )
    parser.set_defaults(func=lambda _args: _usage(parser))
    commands = parser.add_subparsers(dest="limiter_command", metavar="COMMAND")
    path = commands.add_parser(
        "path",
        help="print the absolute path of the built libgpupool.so",
        description=f"Print the absolute path of {LIBRARY} ({ENV} overrides the search).",
    )
    path.set_defaults(func=_path)
