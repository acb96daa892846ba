"""The `gpupool` command: one subcommand per CLI module in COMMANDS (wiring only).

Only the module of the command being run is imported: `gpupool --help` and `gpupool simulate
--help` must not pay for aiohttp, lightkube, grpc or the simulator (about 1.4 s of imports
together). The other commands appear as stubs with their one-line help from COMMANDS, which
tests/unit/cli/test_cli_startup.py checks against what each module registers.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from gpupool.domain.errors import GpupoolError

# command → (the module whose `register(subparsers)` adds it, its one-line help). Each module's
# subcommands set `func(args) -> int`.
COMMANDS: dict[str, tuple[str, str]] = {
    "simulate": (
        "gpupool.cli.simulate",
        "what would pooling do for a cluster? (no arguments: the built-in scenario)",
    ),
    "dev-cluster": (
        "gpupool.cli.devcluster",
        "run a real Kubernetes control plane with fake GPU nodes on this machine",
    ),
    "agent": (
        "gpupool.cli.agent",
        "run the node agent: GPU discovery and the kubelet device plugin for gpupool.io/vgpu",
    ),
    "limiter": ("gpupool.cli.limiter", "the in-container GPU memory limiter (libgpupool)"),
    "webhook": (
        "gpupool.cli.webhook",
        "the admission webhook: GPU pod validation, tenant, vgpu and the quota gate",
    ),
    "extender": (
        "gpupool.cli.extender",
        "run the kube-scheduler extender (filter, prioritize, bind) for gpupool.io/vgpu pods",
    ),
    "controller": (
        "gpupool.cli.controller",
        "run the controller: admission queue (quota gate), leases, node health, reclaim",
    ),
    "defrag": (
        "gpupool.cli.defrag",
        "defragmentation: which slices to move so fragmented cards clear",
    ),
    "status": ("gpupool.cli.views", "the pool: nodes, cards, slices, tenants' quota use"),
    "queue": ("gpupool.cli.views", "pods waiting for quota or a card, in admission order"),
    "leases": ("gpupool.cli.views", "live and recent GpuLeases with GiB-hours"),
    "web": (
        "gpupool.cli.web",
        "serve the web view: pool map, tenant and node pages, live (docs/views.md)",
    ),
    "demo": (
        "gpupool.cli.demo",
        "the product on a local dev cluster: four tenants sharing fake GPUs, live",
    ),
    "usage": (
        "gpupool.cli.usage",
        "GiB-hours and GPU-hours per tenant, namespace or pod over a period (a bill)",
    ),
}
MODULES = tuple(dict.fromkeys(module for module, _ in COMMANDS.values()))


class _Stubs:
    """The subparsers action, but the named commands of a module registered for real; the
    others added as stubs (their help only) when the real module is not loaded."""

    def __init__(self, subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        self.subparsers = subparsers

    def add(self, loaded: Sequence[str]) -> None:
        real = {name for name, (module, _) in COMMANDS.items() if module in loaded}
        for module in loaded:
            importlib.import_module(module).register(self.subparsers)
        for name, (_, help_text) in COMMANDS.items():
            if name not in real:
                self.subparsers.add_parser(name, help=help_text)


def build_parser(command: str | None = "") -> argparse.ArgumentParser:
    """The whole parser (every module imported) by default; with `command`, only that
    command's module is imported (None: none), the others are stubs."""
    parser = argparse.ArgumentParser(prog="gpupool", description="GPU pooling for Kubernetes")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    if command == "":
        loaded: Sequence[str] = MODULES
    elif command in COMMANDS:
        loaded = (COMMANDS[command][0],)
    else:
        loaded = ()
    _Stubs(subparsers).add(loaded)
    return parser


def command_of(argv: Sequence[str]) -> str | None:
    """The subcommand named on the command line (the first word that is not an option)."""
    return next((word for word in argv if not word.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(command_of(words))
    args = parser.parse_args(words)
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
