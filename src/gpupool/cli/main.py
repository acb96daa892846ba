"""The `gpupool` command: one subcommand per CLI module in MODULES (wiring only)."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Each module offers `register(subparsers)`, adding subcommands that set `func(args) -> int`.
MODULES = ("gpupool.cli.devcluster", "gpupool.cli.limiter")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpupool", description="GPU pooling for Kubernetes")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    code: int = func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
