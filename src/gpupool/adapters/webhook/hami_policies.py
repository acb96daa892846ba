"""HAMi's scheduling-policy and mode annotations read as gpupool's, at admission (pure).

`policies` maps what has a gpupool equivalent (`hami.io/node-scheduler-policy` binpack/spread →
`gpupool.io/placement-policy`; `nvidia.com/vgpu-mode: mps` → `gpupool.io/compute-mode: mps`)
and says of every other one that it is ignored, and why: each only steers placement or
isolation, which gpupool does its own way, so none is refused. The resources and the GPU-type
annotations are `hami.py`'s.
"""

from __future__ import annotations

from gpupool.adapters.wire import names

NODE_POLICY = "hami.io/node-scheduler-policy"
GPU_POLICY = "hami.io/gpu-scheduler-policy"
SCORING_WEIGHTS = "hami.io/device-scoring-weights"
VGPU_MODE = "nvidia.com/vgpu-mode"
NUMA_BIND = "nvidia.com/numa-bind"
# gpupool's own: a pod annotation or a namespace label; "false" leaves pods that ask only for
# nvidia.com/gpu to NVIDIA's device plugin (the webhook's --no-adopt-nvidia-gpu, for all pods).

HAMI_POLICY_ANNOTATIONS = (NODE_POLICY, GPU_POLICY, SCORING_WEIGHTS, VGPU_MODE, NUMA_BIND)

# HAMi's GPU policies (which card of the chosen node): what gpupool does instead.
_GPU_POLICIES = {
    "binpack": "kept: gpupool puts a slice on the fullest card of the node that still fits it, "
    "as HAMi's binpack does",
    "spread": "ignored: gpupool has no policy that spreads slices over a node's cards; it puts "
    "each on the fullest card that fits, which keeps whole cards free",
    "topology-aware": "ignored: gpupool already takes a multi-GPU pod's cards from one NVLink "
    "domain when it can, else from one NUMA node",
    "numa": "ignored: gpupool already prefers cards on one NUMA node for a multi-GPU pod",
    "mutex": "ignored: gpupool has no idle-cards-only policy; ask for whole cards "
    "(nvidia.com/gpumem-percentage: 100, or nvidia.com/gpu alone) for cards no other pod shares",
}
# HAMi's node policies that have a gpupool placement policy of the same meaning.
_NODE_POLICIES = {
    "binpack": "the fullest node that fits",
    "spread": "the emptiest node that fits",
}
_VGPU_MODES = {
    "hami-core": "ignored: gpupool's limiter caps the pod's memory as HAMi-core does",
    "mig": "ignored: gpupool does not make MIG instances; the pod gets ordinary slices, each "
    "capped by gpupool's limiter, without MIG's hardware isolation",
}


def _names_of(text: str) -> list[str]:
    return [p.strip().lower() for p in str(text).split(",") if p.strip()]


def policies(annotations: dict[str, str], warnings: list[str]) -> dict[str, str]:
    """gpupool's annotations for HAMi's scheduling and mode annotations, which are removed from
    `annotations`; a warning for each, saying what it became or that it is ignored and why.
    None is refused: each only steers placement or isolation, which gpupool does its own way."""
    out: dict[str, str] = {}
    value = annotations.pop(NODE_POLICY, None)
    if value is not None:
        policy = str(value).strip().lower()
        if policy in _NODE_POLICIES:
            out[names.ANN_PLACEMENT_POLICY] = policy
            warnings.append(
                f"HAMi's annotation {NODE_POLICY}: {value} → {names.ANN_PLACEMENT_POLICY}: "
                f"{policy} (gpupool's {policy}: {_NODE_POLICIES[policy]})"
            )
        else:
            warnings.append(
                f"HAMi's annotation {NODE_POLICY}: {value} is ignored: HAMi's node policies are "
                f"binpack and spread; the extender places the pod by its own policy"
            )
    value = annotations.pop(GPU_POLICY, None)
    if value is not None:
        for policy in _names_of(value) or [str(value)]:
            why = _GPU_POLICIES.get(
                policy,
                "ignored: not one of HAMi's GPU policies (binpack, spread, "
                "topology-aware, numa, mutex)",
            )
            warnings.append(f"HAMi's annotation {GPU_POLICY}: {policy} {why}")
    value = annotations.pop(SCORING_WEIGHTS, None)
    if value is not None:
        warnings.append(
            f"HAMi's annotation {SCORING_WEIGHTS} is ignored: gpupool's placement policies take "
            f"no per-pod weights"
        )
    value = annotations.pop(VGPU_MODE, None)
    if value is not None:
        modes = _names_of(value)
        if modes == ["mps"]:
            out[names.ANN_COMPUTE_MODE] = "mps"
            warnings.append(
                f"HAMi's annotation {VGPU_MODE}: mps → {names.ANN_COMPUTE_MODE}: mps (the pod's "
                f"{names.RES_GPU_COMPUTE} share is enforced through MPS)"
            )
        else:
            for mode in modes or [str(value)]:
                why = _VGPU_MODES.get(
                    mode, "ignored: not one of HAMi's modes (hami-core, mps, mig)"
                )
                warnings.append(f"HAMi's annotation {VGPU_MODE}: {mode} {why}")
    value = annotations.pop(NUMA_BIND, None)
    if value is not None:
        warnings.append(
            f"HAMi's annotation {NUMA_BIND}: {value} is ignored: gpupool prefers cards on one "
            f"NUMA node for a multi-GPU pod but does not require it"
        )
    return out
