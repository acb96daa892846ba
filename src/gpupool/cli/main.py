"""The `gpupool` command: one subcommand per CLI module in MODULES (wiring only)."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from gpupool.domain.errors import GpupoolError

# Each module offers `register(subparsers)`, adding subcommands that set `func(args) -> int`.
MODULES = (
    "gpupool.cli.simulate",
    "gpupool.cli.devcluster",
    "gpupool.cli.agent",
    "gpupool.cli.limiter",
    "gpupool.cli.webhook",
    "gpupool.cli.extender",
    "gpupool.cli.controller",
    "gpupool.cli.defrag",
    "gpupool.cli.views",
    "gpupool.cli.web",
    "gpupool.cli.demo",
)


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
    try:
        code: int = func(args)
    except GpupoolError as exc:
        print(f"gpupool: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gpupool: interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
