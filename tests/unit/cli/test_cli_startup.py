"""`gpupool --help` and `gpupool simulate --help` start without the heavy libraries (the time
itself is measured by bench/cli_startup.py, not here), and the command table's one-line help is
what each module registers."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys

import pytest

from gpupool.cli.main import COMMANDS, MODULES, build_parser, main
from gpupool.placement.policies import POLICIES
from gpupool.placement.policy_names import POLICY_NAMES

HEAVY = ("numpy", "matplotlib", "lightkube", "grpc", "aiohttp", "rich", "prometheus_client")


def modules_after(command: str | None) -> set[str]:
    """The modules a fresh interpreter holds after building the parser for `command`."""
    code = (
        "import json, sys\n"
        "from gpupool.cli.main import build_parser\n"
        f"build_parser({command!r})\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return set(json.loads(done.stdout))


@pytest.mark.parametrize("command", [None, "simulate"])
def test_help_imports_no_heavy_library(command: str | None) -> None:
    loaded = modules_after(command)
    heavy = sorted(m for m in loaded if m.split(".")[0] in HEAVY)
    assert not heavy, f"gpupool {command or ''} --help imports {heavy[:8]}"
    if command == "simulate":
        assert "gpupool.cli.simulate" in loaded  # the command's own module did load


def test_the_table_matches_what_each_module_registers() -> None:
    for module in MODULES:
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        importlib.import_module(module).register(sub)
        registered = {a.dest: a.help for a in sub._choices_actions}
        mine = {name: text for name, (mod, text) in COMMANDS.items() if mod == module}
        assert registered == mine, module


def test_policy_names_are_the_policies() -> None:
    assert tuple(POLICIES) == POLICY_NAMES


def test_a_stubbed_command_still_runs_its_real_parser(capsys: pytest.CaptureFixture[str]) -> None:
    # `limiter` alone is loaded for `gpupool limiter`: its own usage, not a stub's
    assert main(["limiter"]) == 2
    assert "path" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["no-such-command"])
    assert "invalid choice" in capsys.readouterr().err
    full = build_parser()
    assert set(full._subparsers._group_actions[0].choices) == set(COMMANDS)  # type: ignore[union-attr]
