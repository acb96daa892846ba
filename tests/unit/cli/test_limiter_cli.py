"""`gpupool limiter path`: finding the built limiter, and saying how to build it when absent."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from gpupool.cli import limiter


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="gpupool")
    limiter.register(root.add_subparsers(dest="command"))
    return root


def test_the_override_wins(tmp_path: Path) -> None:
    lib = tmp_path / "libgpupool.so"
    lib.write_bytes(b"\x7fELF")
    other = tmp_path / "other.so"
    other.write_bytes(b"\x7fELF")
    assert limiter.limiter_path({"GPUPOOL_LIMITER": str(lib)}, [other]) == lib


def test_an_override_naming_nothing_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(limiter.LimiterNotFound, match="does not name a file"):
        limiter.limiter_path({"GPUPOOL_LIMITER": str(tmp_path / "absent.so")}, [])


def test_first_existing_candidate_is_used(tmp_path: Path) -> None:
    present = tmp_path / "b" / "libgpupool.so"
    present.parent.mkdir()
    present.write_bytes(b"\x7fELF")
    assert limiter.limiter_path({}, [tmp_path / "a" / "libgpupool.so", present]) == present


def test_missing_library_says_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(limiter.LimiterNotFound, match="make native"):
        limiter.limiter_path({}, [tmp_path / "libgpupool.so"])


def test_cli_prints_the_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lib = tmp_path / "libgpupool.so"
    lib.write_bytes(b"\x7fELF")
    monkeypatch.setenv("GPUPOOL_LIMITER", str(lib))
    args = parser().parse_args(["limiter", "path"])
    assert args.func(args) == 0
    printed = capsys.readouterr().out.strip()
    assert Path(printed).is_absolute()
    assert printed == str(lib)


def test_cli_fails_with_a_message_when_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPUPOOL_LIMITER", str(tmp_path / "nope.so"))
    args = parser().parse_args(["limiter", "path"])
    assert args.func(args) == 1
    assert "GPUPOOL_LIMITER" in capsys.readouterr().err


def test_bare_limiter_prints_usage(capsys: pytest.CaptureFixture[str]) -> None:
    args = parser().parse_args(["limiter"])
    assert args.func(args) == 2
    assert "path" in capsys.readouterr().err
