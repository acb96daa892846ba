"""`gpupool status|queue|leases` at the command line: bad input exits 2 with a message that says
what to do, never a stack trace (the cluster's own answers are tested in
tests/e2e/test_views_e2e.py)."""

from __future__ import annotations

import socket
import tomllib
from pathlib import Path

import pytest

from gpupool.cli.main import main

REPO = Path(__file__).resolve().parents[3]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends: nothing listens


def test_a_bad_output_format_exits_2_naming_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["status", "-o", "yaml"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'yaml' (choose from 'text', 'json')" in capsys.readouterr().err


def test_an_unreachable_api_server_exits_2_saying_what_to_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {{server: "https://127.0.0.1:{_closed_port()}", insecure-skip-tls-verify: true}}
users:
- name: u
  user: {{token: expired}}
contexts:
- name: x
  context: {{cluster: c, user: u, namespace: team-a}}
current-context: x
"""
    )
    for command in ("status", "queue", "leases"):
        assert main([command, "--kubeconfig", str(kubeconfig)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("gpupool: error: cannot reach the API server"), err
        assert "Traceback" not in err


def test_it_is_installed_as_a_kubectl_plugin() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kubectl-gpupool"] == scripts["gpupool"]
