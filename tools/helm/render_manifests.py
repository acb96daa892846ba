"""Renders the chart deploy/helm/gpupool into the plain manifests under deploy/.

The chart is the one source of truth; deploy/crds, deploy/rbac (but namespace.yaml and the
per-tenant template tenant.yaml), deploy/policies, deploy/install and deploy/scheduler are
`helm template` of it, release namespace gpupool-system, with tools/helm/plain-values.yaml (the
webhook certificate from cert-manager). Each chart file becomes the plain file of the same name:

    crds/X.yaml                      -> deploy/crds/X.yaml
    templates/rbac/X.yaml            -> deploy/rbac/X.yaml
    templates/policies/X.yaml        -> deploy/policies/X.yaml
    templates/install/X.yaml         -> deploy/install/X.yaml
    templates/scheduler/configmap.yaml -> deploy/scheduler/kube-scheduler-config.yaml (its data)

Usage: .venv/bin/python tools/helm/render_manifests.py [--check]
  (no flag) write the files; --check: write nothing, list the files that differ, exit 1 if any.
tests/unit/deploy/test_chart.py runs the check.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "gpupool"
VALUES = REPO / "tools" / "helm" / "plain-values.yaml"
NAMESPACE = "gpupool-system"
RELEASE = "gpupool"
SCHEDULER_SOURCE = "templates/scheduler/configmap.yaml"
SCHEDULER_KEY = "kube-scheduler-config.yaml"
FOLDERS = {
    "crds/": "crds",
    "templates/rbac/": "rbac",
    "templates/policies/": "policies",
    "templates/install/": "install",
}
NOTICE = (
    "# Rendered from deploy/helm/gpupool/{source}\n"
    "# by tools/helm/render_manifests.py: edit the chart, not this file.\n"
)
_SOURCE = re.compile(rf"^---\n# Source: {RELEASE}/(.+)\n", re.M)


def helm_binary() -> Path:
    """tools/helm/build.sh's helm (built on first use)."""
    built = subprocess.run(
        [str(REPO / "tools" / "helm" / "build.sh")], capture_output=True, text=True, check=False
    )
    if built.returncode != 0:
        raise RuntimeError(f"tools/helm/build.sh failed:\n{built.stderr[-3000:]}")
    return Path(built.stdout.strip().splitlines()[-1])


def template(helm: Path, *args: str) -> str:
    """`helm template` of the chart as gpupool-system's release `gpupool`, CRDs included."""
    argv = [str(helm), "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--include-crds"]
    done = subprocess.run([*argv, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"helm template failed:\n{done.stderr}")
    return done.stdout


def by_source(rendered: str) -> dict[str, str]:
    """helm's output split back into its chart files: source path -> their documents, in order."""
    parts = _SOURCE.split(rendered)
    if parts[0].strip():
        raise ValueError(f"helm output before the first source: {parts[0][:200]!r}")
    files: dict[str, list[str]] = {}
    for source, text in zip(parts[1::2], parts[2::2], strict=True):
        files.setdefault(source, []).append(text.rstrip("\n") + "\n")
    return {source: "---\n".join(docs) for source, docs in files.items()}


def plain_files(rendered: str) -> dict[Path, str]:
    """Each plain manifest's path under the repository and its text."""
    out: dict[Path, str] = {}
    for source, text in by_source(rendered).items():
        notice = NOTICE.format(source=source)
        if source == SCHEDULER_SOURCE:
            [configmap] = [d for d in yaml.safe_load_all(text) if d]
            path = Path("deploy/scheduler") / SCHEDULER_KEY
            out[path] = notice + configmap["data"][SCHEDULER_KEY]
            continue
        folder = next((f for prefix, f in FOLDERS.items() if source.startswith(prefix)), None)
        if folder is None or source.count("/") != source.startswith("templates/") + 1:
            raise ValueError(f"{source}: no plain manifest is rendered from this chart file")
        out[Path("deploy") / folder / Path(source).name] = notice + text
    return out


def stale(files: dict[Path, str], root: Path = REPO) -> list[Path]:
    """The files under `root` that are missing or differ from their rendering."""
    return [
        p for p, text in files.items() if not (root / p).is_file() or (root / p).read_text() != text
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 on a difference")
    args = parser.parse_args(argv)
    files = plain_files(template(helm_binary(), "-f", str(VALUES)))
    changed = stale(files)
    if args.check:
        for path in changed:
            print(f"{path}: not what the chart renders", file=sys.stderr)
        return 1 if changed else 0
    for path in changed:
        (REPO / path).write_text(files[path])
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
