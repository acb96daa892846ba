"""Time `make test` from a fresh clone, cold (every cache empty) or warm; print JSON.

    .venv/bin/python bench/make_test_time.py --mode cold|warm [--phases venv,lint,...]
        [--source REPO] [--keep] [--dry-run]

Each run clones `--source` (default: this checkout's repository, its HEAD commit) into a new
temporary folder, links `../shared` beside it (the Alibaba trace, as tests/trace expect), and
runs the phases of `make test` one after another, timing each (wall-clock seconds):

    clone     git clone of the commit
    venv      make venv             (pip: the package and its dev extras)
    binaries  make k8s native helm realnode prometheus
                                    (kube-apiserver & co., kubelet, helm from Go modules; the C
                                    limiter; the real node's packages and images; promtool)
    image     tools/image/build.sh  (the Debian base with mmdebstrap, the image with buildah)
    lint      make lint
    pytest    .venv/bin/pytest -n 2
                                    (every test on two workers, as `make test` runs it; under
                                    flock /tmp/gpupool-realnode.lock, as the real-node tests need
                                    the host's fixed paths to themselves)

`make test` itself is lint, binaries, then pytest, whose image tests build the image; it is
timed here as its own phase, before pytest, so that pytest finds it built (the sum is the same).

cold: every cache the build reads points into the run's folder, empty: XDG_CACHE_HOME (gpupool's
k8s, helm, image and real-node caches live under it), GOCACHE, GOMODCACHE, GOPATH, PIP_CACHE_DIR;
GPUPOOL_K8S_BIN, GPUPOOL_HELM_BIN, GPUPOOL_IMAGE_CACHE and GPUPOOL_REALNODE_IMAGES are unset. The
Debian packages `make realnode` and `make prometheus` install (apt-get) stay on the host: a
machine without them also pays for their download. warm: the caches as they are (a second run
after a cold one, or a developer's machine).

--phases runs only those (and what they need: lint and pytest a venv, pytest everything before
it). --dry-run prints the plan (commands, environment, folders) and runs nothing. A failed phase
stops the run; the JSON says which and its last output lines. The run's folder is deleted
afterwards unless --keep (a cold one holds several GiB of caches).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
REALNODE_LOCK = "/tmp/gpupool-realnode.lock"
PYTEST_ARGS = ("-q", "-n", "2")  # as the Makefile's `test` runs pytest
PHASES = ("clone", "venv", "binaries", "image", "lint", "pytest")
# What a phase needs run before it in the same clone.
NEEDS = {
    "clone": (),
    "venv": ("clone",),
    "binaries": ("clone", "venv"),
    "image": ("clone",),
    "lint": ("clone", "venv"),
    "pytest": ("clone", "venv", "binaries", "image"),
}
# The caches a cold run empties: each variable points into the run's folder.
COLD_CACHES = ("XDG_CACHE_HOME", "GOCACHE", "GOMODCACHE", "GOPATH", "PIP_CACHE_DIR")
OVERRIDES = (
    "GPUPOOL_K8S_BIN",
    "GPUPOOL_HELM_BIN",
    "GPUPOOL_IMAGE_CACHE",
    "GPUPOOL_REALNODE_IMAGES",
)


@dataclass(frozen=True)
class Phase:
    name: str
    argv: tuple[str, ...]


def commands(clone: Path, source: str) -> dict[str, Phase]:
    make = ("make", "-C", str(clone))
    return {
        "clone": Phase("clone", ("git", "clone", "--quiet", "--no-hardlinks", source, str(clone))),
        "venv": Phase("venv", (*make, "venv")),
        "binaries": Phase("binaries", (*make, "k8s", "native", "helm", "realnode", "prometheus")),
        "image": Phase("image", (str(clone / "tools" / "image" / "build.sh"),)),
        "lint": Phase("lint", (*make, "lint")),
        "pytest": Phase(  # as `make test` runs it: two xdist workers, one file per unit
            "pytest",
            ("flock", REALNODE_LOCK, str(clone / ".venv" / "bin" / "pytest"), *PYTEST_ARGS),
        ),
    }


def selected(wanted: list[str]) -> list[str]:
    """The phases to run, in order: those asked for and what they need."""
    unknown = [p for p in wanted if p not in PHASES]
    if unknown:
        raise SystemExit(f"make_test_time: unknown phase {unknown[0]!r}; the phases: {PHASES}")
    chosen = {need for p in wanted for need in (p, *NEEDS[p])}
    return [p for p in PHASES if p in chosen]


def environment(mode: str, folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in OVERRIDES or mode == "warm"}
    if mode == "cold":
        for name in COLD_CACHES:
            env[name] = str(folder / "caches" / name.lower())
    return env


def head(source: str) -> str:
    done = subprocess.run(
        ["git", "-C", source, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def run_phase(phase: Phase, env: dict[str, str], cwd: Path, commit: str) -> tuple[float, int, str]:
    started = time.perf_counter()
    done = subprocess.run(
        list(phase.argv), env=env, cwd=cwd, capture_output=True, text=True, check=False
    )
    if phase.name == "clone" and done.returncode == 0:
        clone = Path(phase.argv[-1])
        checkout = subprocess.run(
            ["git", "-C", str(clone), "checkout", "--quiet", commit],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if checkout.returncode != 0:
            done = checkout
        elif SHARED.exists():  # tests and bench look for ../shared (the trace)
            (clone.parent / "shared").symlink_to(SHARED)
    seconds = time.perf_counter() - started
    tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
    return round(seconds, 1), done.returncode, tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("cold", "warm"), required=True)
    parser.add_argument("--phases", default=",".join(PHASES), help="comma-separated")
    parser.add_argument("--source", default=str(REPO), help="the repository to clone")
    parser.add_argument("--keep", action="store_true", help="keep the run's folder")
    parser.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    args = parser.parse_args(argv)
    phases = selected([p for p in args.phases.split(",") if p])
    commit = head(args.source)
    folder = Path(tempfile.mkdtemp(prefix=f"make-test-{args.mode}-"))
    clone = folder / "gpupool"
    plan = commands(clone, args.source)
    env = environment(args.mode, folder)
    report: dict[str, object] = {
        "mode": args.mode,
        "source": args.source,
        "commit": commit,
        "folder": str(folder),
        "cpus": os.cpu_count(),
        "load_before": round(os.getloadavg()[0], 2),
        "caches": {k: env[k] for k in COLD_CACHES if k in env},
    }
    if args.dry_run:
        report["plan"] = {p: list(plan[p].argv) for p in phases}
        print(json.dumps(report, indent=2))
        shutil.rmtree(folder)
        return 0
    seconds: dict[str, float] = {}
    report["seconds"] = seconds
    rc = 0
    try:
        for name in phases:
            cwd = folder if name == "clone" else clone  # pytest finds its rootdir from here
            took, rc, tail = run_phase(plan[name], env, cwd, commit)
            seconds[name] = took
            if rc != 0:
                report["failed"] = {"phase": name, "rc": rc, "output_tail": tail}
                break
        report["total_s"] = round(sum(seconds.values()), 1)
        report["load_after"] = round(os.getloadavg()[0], 2)
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps(report, indent=2))
    return 1 if rc != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
