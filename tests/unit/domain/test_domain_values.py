"""Units, the model catalogue and request validation."""

from __future__ import annotations

import pytest

from gpupool.domain import (
    GiB,
    InvalidQuantity,
    InvalidRequest,
    MiB,
    Request,
    UnknownGpuModel,
    format_bytes,
    get_model,
    parse_bytes,
    parse_model_list,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("12Gi", 12 * GiB),
        ("500Mi", 500 * MiB),
        ("1G", 10**9),
        ("1024", 1024),
        ("1.5Gi", 3 * GiB // 2),
        (" 2Ti ", 2 * 1024 * GiB),
        (7, 7),
    ],
)
def test_parse_bytes(text: str | int, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["-3", "0", "0Gi", "12GB", "abc", "", "1.2.3Gi", True])
def test_parse_bytes_rejects_with_the_expected_form(text: str) -> None:
    with pytest.raises(InvalidQuantity, match="positive quantity such as 12Gi"):
        parse_bytes(text, what="gpupool.io/gpu-memory")


def test_format_bytes_round_trips_common_sizes() -> None:
    assert format_bytes(int(9.5 * GiB)) == "9.5Gi"
    assert format_bytes(512 * MiB) == "512Mi"
    assert parse_bytes(format_bytes(80 * GiB)) == 80 * GiB


@pytest.mark.parametrize(
    ("name", "memory_gib", "sms"),
    [
        ("A100-40GB", 40, 108),
        ("A100-80GB", 80, 108),
        ("H100", 79.6, 132),
        ("H800", 79.6, 132),
        ("H200", 140.4, 132),
        ("L4", 22.5, 58),
        ("A10", 22.5, 72),
        ("T4", 15, 40),
        ("V100-16GB", 16, 80),
        ("V100-32GB", 32, 80),
        ("P100", 16, 56),
        ("RTX-3090", 24, 82),
        ("RTX-4090", 24, 128),
    ],
)
def test_catalogue_has_real_memory_and_sm_counts(name: str, memory_gib: float, sms: int) -> None:
    model = get_model(name)
    assert model.memory_bytes is not None
    assert model.memory_bytes / GiB == pytest.approx(memory_gib, abs=0.1)
    assert model.sm_count == sms


def test_trace_codes_are_named_unknowns_and_aliases_resolve() -> None:
    assert not get_model("G2").known and get_model("G3").memory_bytes is None
    assert get_model("v100m32").name == "V100-32GB"
    assert parse_model_list("A100|h800") == ("A100-40GB", "H800")
    assert parse_model_list("") == ()


def test_unknown_model_lists_the_known_ones() -> None:
    with pytest.raises(UnknownGpuModel, match=r"unknown GPU model 'B300'.*A100-80GB"):
        get_model("B300")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cpu_milli": -1}, "cpu must be 0 or more"),
        ({"gpu_count": -1}, "GPU count must be 0 or more"),
        ({"gpu_count": 1, "gpu_milli": 0}, "between 1 and 1000"),
        ({"gpu_count": 1, "gpu_milli": 1500}, "between 1 and 1000"),
        ({"gpu_count": 1, "gpu_memory_bytes": -5}, "positive quantity"),
        ({"gpu_count": 1, "gpu_memory_bytes": GiB, "gpu_milli": 300}, "not both"),
        ({"gpu_count": 1, "gpu_memory_bytes": GiB, "compute_pct": 101}, "1 to 100"),
        ({"gpu_count": 0, "gpu_memory_bytes": GiB}, "for 0 GPUs"),
        ({"gpu_count": 1, "models": ("Z9",)}, "unknown GPU model"),
    ],
)
def test_request_validation(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises((InvalidRequest, UnknownGpuModel), match=message):
        Request(name="bad", **kwargs)  # type: ignore[arg-type]


def test_request_kinds() -> None:
    assert Request("a", gpu_count=1).whole_cards
    assert Request("b", gpu_count=1, gpu_milli=460).is_share
    slice_req = Request("c", gpu_count=1, gpu_memory_bytes=12 * GiB, compute_pct=30)
    assert slice_req.is_share and slice_req.compute_milli == 300
    assert Request("d", gpu_count=4).gpu_request_milli == 4000
