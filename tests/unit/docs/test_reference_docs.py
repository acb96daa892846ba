"""The docs stay true to the code: generated reference pages are current, every gpupool.io name
the code uses is documented, every relative link and anchor in README.md and docs/ resolves,
and the docs speak of the project, not of the sessions that built it."""

from __future__ import annotations

import glob
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from gpupool.adapters.wire import names

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
ANNOTATIONS_MD = ROOT / "docs" / "reference" / "annotations.md"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "tools/gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("page", ["flags.md", "crds.md"])
def test_the_generated_reference_is_current(page: str) -> None:
    gen = _generator()
    path = ROOT / "docs" / "reference" / page
    expected = gen.rendered()[path]
    assert path.read_text() == expected, (
        f"docs/reference/{page} is stale: run .venv/bin/python tools/gen_reference.py"
    )


def test_the_flags_page_names_every_command() -> None:
    text = (ROOT / "docs" / "reference" / "flags.md").read_text()
    for command in (
        "simulate",
        "dev-cluster",
        "agent",
        "webhook",
        "extender",
        "controller",
        "web",
        "demo",
    ):
        assert f"## gpupool {command}\n" in text


def _names_in_code() -> set[str]:
    found = {v for v in vars(names).values() if isinstance(v, str) and v.startswith("gpupool.io/")}
    for file in (ROOT / "src" / "gpupool").rglob("*.py"):
        found.update(re.findall(r"[\"'](gpupool\.io/[a-z0-9][a-z0-9.-]*)", file.read_text()))
    found.discard(names.API_VERSION)
    return found


def test_every_gpupool_name_the_code_uses_is_in_the_annotations_reference() -> None:
    documented = set(re.findall(r"`(gpupool\.io/[a-z0-9.-]+)`", ANNOTATIONS_MD.read_text()))
    missing = sorted(_names_in_code() - documented)
    assert not missing, f"add these to docs/reference/annotations.md: {missing}"


def _anchor(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    anchors: set[str] = set()
    in_code = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            anchors.add(_anchor(line.lstrip("#")))
    return anchors


_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans: a regex there is not a link
    return [t for t in _LINK.findall(text) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in _links(page):
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        checked = dest.exists() and bool(anchor) and dest.suffix == ".md"
        if not dest.exists() or (checked and anchor not in _anchors(dest)):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: broken links {broken}"


# A code span that starts like a repository path, or a path inside src/gpupool, names a file or
# folder that must exist: a module that moves makes the page that names it fail here.
_TOP = ("src/", "tests/", "bench/", "deploy/", "native/", "tools/", "docs/")
_PACKAGES = tuple(
    f"{p.name}/" for p in (ROOT / "src" / "gpupool").iterdir() if (p / "__init__.py").exists()
)


# A path named as history ("formerly `x.py`", "`x.py` is gone") or as a pattern with a
# placeholder (`deploy/crds/X`) is not a claim that it exists.
_HISTORY = re.compile(
    r"\b(?:formerly|used to be|were|was|moved out of|moved from|before)\W*"
    r"(?:`[^`]*`[\s,]*(?:and|or)?\s*)*$",
    re.I,
)
_GONE = re.compile(r"^\W*(?:\([^)]*\)\s*)?(?:is|are) gone\b")
_BUILT = ("native/build", "build/")  # build outputs: there only after `make native` / a test run
_PLACEHOLDER = re.compile(r"(?:^|/)[A-Z][A-Z_]*(?:/|$)")


def _named_paths(path: Path) -> list[str]:
    text = path.read_text()
    named = []
    for match in re.finditer(r"`([^`\n ]+)`", text):
        span = match.group(1)
        if not span.startswith(_TOP + _PACKAGES) or _PLACEHOLDER.search(span):
            continue
        before = text[max(0, match.start() - 80) : match.start()]
        after = text[match.end() : match.end() + 40]
        if _HISTORY.search(before) or _GONE.search(after):
            continue
        named.append(span)
    return named


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_a_page_names_exists(page: Path) -> None:
    missing = []
    for named in _named_paths(page):
        named = named.partition("::")[0]  # a pytest node id names its file
        if named.startswith(_BUILT):
            continue
        where = named if named.startswith(_TOP) else f"src/gpupool/{named}"
        pattern = where.rstrip("/")
        if not (glob.glob(str(ROOT / pattern)) or glob.glob(str(ROOT / pattern) + "*")):
            missing.append(named)
    assert not missing, f"{page.relative_to(ROOT)} names paths that do not exist: {missing}"


# Words about the sessions that built gpupool, not about gpupool.
_SESSION_WORDS = re.compile(
    r"\bthe issue\b|\bthis stop\b|\bthis session\b|\bthis 2-core machine\b",
    re.I,
)


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_docs_speak_of_the_project(page: Path) -> None:
    hits = [m.group(0) for m in _SESSION_WORDS.finditer(page.read_text())]
    assert not hits, f"{page.relative_to(ROOT)} says {hits}: speak of the reference machine"
