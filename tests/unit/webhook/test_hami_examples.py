"""HAMi v2.10's 15 NVIDIA example manifests (hami_examples/, copied unchanged), each admitted by
gpupool's webhook as it stands: what gpupool gives every pod they describe (docs/hami.md's
migration table), or the refusal and its message. The cluster is one of A100-80GB cards as a
GpuNode reports them: 81,920 MiB each, 72 GiB of it allocatable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpupool.adapters.webhook.cards import Card
from gpupool.adapters.webhook.hami import MigNotSupported
from gpupool.adapters.webhook.mutate import ClusterFacts, mutate_pod
from gpupool.domain.errors import InvalidRequest
from gpupool.domain.units import GiB, MiB

EXAMPLES = Path(__file__).parent / "hami_examples"
STAMP = "2026-01-02T03:04:05.000006Z"
CLUSTER = ClusterFacts(cards=(Card("A100-80GB", 72 * GiB, 81920 * MiB),) * 8)


def _pods(name: str) -> list[dict[str, Any]]:
    """The pods a manifest makes: its Pods, and a Deployment's template as its pod."""
    pods = []
    for doc in yaml.safe_load_all((EXAMPLES / name).read_text()):
        if not doc:
            continue
        if doc["kind"] == "Pod":
            pods.append(doc)
        elif doc["kind"] == "Deployment":
            template = doc["spec"]["template"]
            pods.append(
                {
                    "metadata": {"name": "from-template", **template["metadata"]},
                    "spec": template["spec"],
                }
            )
    for p in pods:
        p["metadata"]["namespace"] = "team-a"
    return pods


def _admitted(pod: dict[str, Any]) -> tuple[dict[str, str], dict[str, str], tuple[str, ...]]:
    """(the GPU container's gpupool limits, the pod's gpupool annotations but queued-at, the
    warnings)."""
    mutation = mutate_pod(pod, {}, STAMP, CLUSTER)
    assert mutation.gpu is not None, "every example asks for GPUs"
    out = json.loads(json.dumps(pod))
    for op in mutation.patch:
        parts = op["path"].split("/")[1:]
        target = out
        for part in parts[:-1]:
            target = target[int(part)] if isinstance(target, list) else target[part]
        target[parts[-1]] = op["value"]
    [limits] = [
        c["resources"]["limits"]
        for c in out["spec"]["containers"]
        if "gpupool.io/vgpu" in c["resources"]["limits"]
    ]
    assert not [k for k in limits if k.startswith("nvidia.com/")], limits
    ours = {k.removeprefix("gpupool.io/"): str(v) for k, v in limits.items() if "gpupool" in k}
    annotations = {
        k.removeprefix("gpupool.io/"): v
        for k, v in out["metadata"]["annotations"].items()
        if k.startswith("gpupool.io/")
        and k not in ("gpupool.io/queued-at", "gpupool.io/translated")
    }
    assert not [
        k for k in out["metadata"]["annotations"] if k.startswith(("nvidia.com/", "hami.io/"))
    ]
    return ours, annotations, mutation.warnings


def _gpu(count: int, memory: str | None = None, compute: str | None = None) -> dict[str, str]:
    out = {"gpu": str(count), "vgpu": str(count)}
    if memory is not None:
        out["gpu-memory"] = memory
    if compute is not None:
        out["compute"] = compute
    return {("gpu-compute" if k == "compute" else k): v for k, v in out.items()}


# file → for each pod it makes: (gpupool's resources, gpupool's annotations, a warning it gets)
ADMITTED: dict[str, list[tuple[dict[str, str], dict[str, str], str]]] = {
    "default_use.yaml": [(_gpu(1, "3000Mi", "30"), {}, "nvidia.com/gpumem: 3000")],
    "default_use_legacy.yaml": [(_gpu(2), {}, "gpupool serves pods that ask for nvidia.com/gpu")],
    "dynamic_mig_example.yaml": [
        (_gpu(2, "8000Mi"), {}, "nvidia.com/vgpu-mode: mig ignored: gpupool does not make MIG")
    ],
    "example.yaml": [(_gpu(1, "3000Mi"), {}, "nvidia.com/gpumem: 3000 → gpupool.io/gpu-memory")],
    "specify_card_type_not_use.yaml": [
        (_gpu(2), {}, "'1080', '2080' match no GPU model gpupool knows, so no card gpupool serves")
    ],
    "specify_card_type_to_use.yaml": [
        (
            _gpu(2),
            {"gpu-model": "A100-40GB|A100-80GB|V100-16GB|V100-32GB"},
            "nvidia.com/use-gputype: A100,V100 → gpupool.io/gpu-model",
        )
    ],
    "specify_scheduling_policy.yaml": [
        (
            _gpu(1),
            {"placement-policy": "spread"},
            "hami.io/node-scheduler-policy: spread → gpupool.io/placement-policy: spread",
        )
    ],
    "use_as_normal.yaml": [
        (_gpu(1), {}, "nvidia.com/gpu: 1 → gpupool.io/gpu: 1 (a whole card)"),
        (_gpu(1), {}, "nvidia.com/gpu: 1 → gpupool.io/gpu: 1 (a whole card)"),
    ],
    "use_exclusive_card.yaml": [(_gpu(2, None, "100"), {}, "gpumem-percentage: 100 → whole cards")],
    "use_memory_fraction.yaml": [
        (_gpu(2, "40Gi", "30"), {}, "gpupool.io/gpu-memory: 40Gi on each of 2 cards")
    ],
    "use_sharing_card.yaml": [
        (_gpu(1, "32Gi", "60"), {}, "(40% of the card's 80Gi)"),
        (_gpu(1, "48Gi", "40"), {}, "(60% of the card's 80Gi)"),
    ],
    "vllm_cross_vgpu.yaml": [
        (_gpu(2, "24Gi", "30"), {}, "gpupool.io/gpu-memory: 24Gi on each of 2 cards")
    ],
}

REFUSED: dict[str, tuple[type[Exception], str]] = {
    "mig_example.yaml": (
        MigNotSupported,
        "container 'ubuntu-container' asks for nvidia.com/mig-3g.20gb, an NVIDIA MIG instance; "
        "gpupool does not partition cards with MIG yet",
    ),
    "specify_uuid_not_use.yaml": (
        InvalidRequest,
        "annotation nvidia.com/nouse-gpuuuid has no gpupool equivalent",
    ),
    "specify_uuid_to_use.yaml": (
        InvalidRequest,
        "annotation nvidia.com/use-gpuuuid has no gpupool equivalent",
    ),
}


def test_every_example_is_judged_here() -> None:
    files = {p.name for p in EXAMPLES.glob("*.yaml")}
    assert len(files) == 15
    assert files == set(ADMITTED) | set(REFUSED)


@pytest.mark.parametrize("name", sorted(ADMITTED))
def test_what_gpupool_gives_each_example(name: str) -> None:
    pods = _pods(name)
    assert len(pods) == len(ADMITTED[name])
    for pod, (resources, wanted, warning) in zip(pods, ADMITTED[name], strict=True):
        ours, stamped, warnings = _admitted(pod)
        assert ours == resources
        assert stamped == wanted
        assert any(warning in w for w in warnings), warnings


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_the_examples_gpupool_refuses_say_why(name: str) -> None:
    error, message = REFUSED[name]
    [pod] = _pods(name)
    with pytest.raises(error) as caught:
        mutate_pod(pod, {}, STAMP, CLUSTER)
    assert message in str(caught.value)


def test_the_scheduling_policy_example_says_what_each_annotation_became() -> None:
    [pod] = _pods("specify_scheduling_policy.yaml")
    _, _, warnings = _admitted(pod)
    assert (
        "HAMi's annotation hami.io/gpu-scheduler-policy: binpack kept: gpupool puts a slice on the "
        "fullest card of the node that still fits it, as HAMi's binpack does"
    ) in warnings
