"""Compute modes, the pure decision and the ConfigMap's parser: which mode and MPS percentage a
lease gets for a pod's annotation, class, card model and the operators' defaults; a ConfigMap
that does not parse is refused whole, naming the key, and the last good settings are kept."""

from __future__ import annotations

import pytest

from gpupool.adapters.kubernetes.compute_modes_watch import ComputeModesHolder
from gpupool.adapters.wire.compute_modes import read_compute_modes
from gpupool.domain.compute_modes import (
    BUILT_IN,
    MPS,
    NONE,
    ComputeModes,
    ComputeSetting,
    InvalidComputeModes,
    WorkloadClass,
    decide_compute,
)

INFERENCE, TRAINING = WorkloadClass.INFERENCE, WorkloadClass.TRAINING
MODES = read_compute_modes(
    {
        "inference": "mps: true, activeThreadPercentage: 50",
        "training": "mps: false",
        "H100-80GB.inference": "{mps: true, activeThreadPercentage: 25}",
        "L4.inference": "mps: false",
    }
)


def _decide(
    *,
    pod_mode: str | None = None,
    workload: WorkloadClass = INFERENCE,
    whole: bool = False,
    model: str = "A100-80GB",
    pct: int | None = None,
    modes: ComputeModes = MODES,
) -> tuple[str, int | None]:
    got: ComputeSetting = decide_compute(pod_mode=pod_mode, workload=workload,
                                         whole_or_exclusive=whole, model=model, compute_pct=pct,
                                         modes=modes)  # fmt: skip
    return got.mode, got.percentage


def test_no_configmap_means_no_mps_unless_the_pod_asks() -> None:
    assert _decide(modes=BUILT_IN) == (NONE, None)
    assert _decide(modes=BUILT_IN, pod_mode="mps", pct=30) == (MPS, 30)
    assert _decide(modes=BUILT_IN, pod_mode="mps") == (MPS, 100)


def test_inference_pods_get_their_models_default_else_the_classs() -> None:
    assert _decide(model="A100-80GB") == (MPS, 50)  # the class default
    assert _decide(model="H100") == (MPS, 25)  # the model's own
    assert _decide(model="L4") == (NONE, None)  # the model turns it off
    assert _decide(model="H100", pct=40) == (MPS, 40)  # the pod's own share wins


def test_training_exclusive_and_whole_gpu_pods_run_without_mps_unless_they_ask() -> None:
    assert _decide(workload=TRAINING) == (NONE, None)
    assert _decide(whole=True) == (NONE, None)
    only_inference = read_compute_modes({"inference": "mps: true"})
    assert _decide(workload=TRAINING, modes=only_inference) == (NONE, None)
    assert _decide(workload=TRAINING, pod_mode="mps") == (MPS, 100)
    assert _decide(whole=True, pod_mode="mps", pct=60) == (MPS, 60)


def test_an_operator_may_turn_mps_on_for_training_but_never_for_whole_gpus() -> None:
    modes = read_compute_modes({"training": "mps: true, activeThreadPercentage: 70"})
    assert _decide(workload=TRAINING, modes=modes) == (MPS, 70)
    assert _decide(workload=TRAINING, whole=True, modes=modes) == (NONE, None)


def test_a_pods_none_wins_over_any_default() -> None:
    assert _decide(pod_mode="none", model="H100") == (NONE, None)


def test_block_yaml_and_model_aliases_are_read() -> None:
    modes = read_compute_modes({"a100-80gb.inference": "mps: true\nactiveThreadPercentage: 35\n"})
    assert _decide(modes=modes) == (MPS, 35)
    assert read_compute_modes(None) == BUILT_IN == read_compute_modes({})


@pytest.mark.parametrize(
    ("data", "key", "says"),
    [
        ({"inference": "mps: maybe"}, "inference", "mps must be true or false"),
        ({"batch": "mps: true"}, "batch", "a key is a pod class"),
        ({"Z9000.inference": "mps: true"}, "Z9000.inference", "unknown GPU model"),
        ({"inference": "mps: true, activeThreadPercentage: 150"}, "inference", "1 to 100"),
        ({"inference": "mps: false, activeThreadPercentage: 50"}, "inference", "mps is false"),
        ({"inference": "mps: true, threads: 5"}, "inference", "unknown field(s) threads"),
        ({"inference": "{mps: true"}, "inference", "is not a mapping"),
        ({"training": "[1, 2]"}, "training", "is not a mapping"),
        ({"A100-80GB.inference": "mps: true", "a100-80gb.inference": "mps: false"},
         "a100-80gb.inference", "set twice"),
    ],
)  # fmt: skip
def test_a_bad_configmap_is_refused_whole_naming_the_key(
    data: dict[str, str], key: str, says: str
) -> None:
    with pytest.raises(InvalidComputeModes) as caught:
        read_compute_modes({"training": "mps: false", **data})
    assert caught.value.key == key and says in str(caught.value), str(caught.value)


def _configmap(version: str, data: dict[str, str]) -> dict[str, object]:
    return {"metadata": {"name": "gpupool-compute-modes", "resourceVersion": version}, "data": data}


def test_the_holder_keeps_the_last_good_settings_and_says_so_once_per_version() -> None:
    holder = ComputeModesHolder()
    assert holder.current == BUILT_IN
    assert holder.take(_configmap("1", {"inference": "mps: true"}), "ns/cm") is None
    good = holder.current
    assert _decide(modes=good) == (MPS, 100)
    refused = holder.take(_configmap("2", {"inference": "mps: true", "x": "mps: true"}), "ns/cm")
    assert refused is not None and "key 'x'" in refused.message
    assert "kept: inference: MPS" in refused.message
    assert holder.current is good  # nothing of version 2 applied, not even its good key
    assert holder.take(_configmap("2", {"x": "?"}), "ns/cm") is None  # said once
    assert holder.take(_configmap("3", {"training": "mps: true"}), "ns/cm") is None
    assert _decide(modes=holder.current) == (NONE, None)  # inference default gone with v3
    assert holder.take(None, "ns/cm") is None and holder.current == BUILT_IN  # deleted
