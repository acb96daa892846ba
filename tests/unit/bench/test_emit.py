"""bench/emit.py: the benchmarks' common tail, the result printed as JSON and written with --out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.bench import bench_module

emit = bench_module("emit")


def test_prints_the_json_and_writes_nothing_without_out(capsys: pytest.CaptureFixture[str]) -> None:
    text = emit.emit({"a": [1, 2]}, None)
    assert text == json.dumps({"a": [1, 2]}, indent=2)
    assert capsys.readouterr().out == text + "\n"


def test_writes_the_same_text_with_a_newline_its_folder_made(tmp_path: Path) -> None:
    said: list[str] = []
    out = tmp_path / "results" / "deeper" / "run.json"
    text = emit.emit({"b": 1}, out, indent=1, say=said.append)
    assert said == [text]
    assert text == json.dumps({"b": 1}, indent=1)
    assert out.read_text() == text + "\n"
