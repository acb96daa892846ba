"""The chart's webhook.adoptNvidiaGpu: true (the default) sends pods asking for nvidia.com/gpu
and MIG profiles to the webhook, which serves them; false sends neither and starts the webhook
with --no-adopt-nvidia-gpu. Either way the rendered configurations are what the webhook's own
command line would register (tests/unit/deploy/test_chart.py checks the default the same way)."""

from __future__ import annotations

import argparse
import contextlib
import io
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpupool.adapters.webhook import register as registration
from gpupool.cli import webhook as webhook_cli
from gpupool.cli.main import build_parser

CHART = Path(__file__).resolve().parents[3] / "deploy" / "helm" / "gpupool"


def _template(helm: Path, *args: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [str(helm), "template", "gpupool", str(CHART), "--namespace", "gpu", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [found] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def _parse(argv: list[str]) -> argparse.Namespace:
    with contextlib.redirect_stderr(io.StringIO()):
        return build_parser().parse_args(argv)


@pytest.mark.parametrize("adopt", [True, False])
def test_the_configurations_follow_adopt_nvidia_gpu(helm: Path, adopt: bool) -> None:
    docs = _template(helm, "--set", f"webhook.adoptNvidiaGpu={str(adopt).lower()}")
    deployment = _one(docs, "Deployment", "gpupool-webhook")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert ("--no-adopt-nvidia-gpu" in args) is not adopt
    config = webhook_cli._config(_parse([*args, "--register-service", "gpu/gpupool-webhook/443"]))
    assert config.adopt_nvidia_gpu is adopt
    [mutating, _] = registration.configurations(
        registration.Registration(
            target=registration.Target(config.register_url, config.register_service),
            ca_bundle=b"",
            skip_namespaces=config.skip_namespaces,
            adopt_nvidia_gpu=config.adopt_nvidia_gpu,
        )
    )
    rendered = _one(docs, "MutatingWebhookConfiguration", "gpupool")
    [hook] = rendered["webhooks"]
    [expected] = mutating["webhooks"]
    assert hook["matchConditions"] == expected["matchConditions"]
    assert ("'nvidia.com/gpu'" in hook["matchConditions"][0]["expression"]) is adopt
