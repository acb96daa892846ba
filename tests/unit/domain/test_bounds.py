"""The bounds on what tenants write (`domain.bounds`): a quantity's text is refused before any
arithmetic when it is too long or its exponent too large, and after it beyond 2^63-1; the
chart's CRDs carry the same maxima as the code."""

from __future__ import annotations

import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpupool.domain import bounds
from gpupool.domain.errors import InvalidQuantity
from gpupool.domain.quantity import parse_quantity

CRDS = Path(__file__).resolve().parents[3] / "deploy" / "helm" / "gpupool" / "crds"


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("1e400", "exponent e400"),
        ("1e-400", "exponent e-400"),
        ("1e99999999999", "exponent e99999999999"),
        ("9223372036854775808", "beyond the largest quantity Kubernetes holds (2^63-1"),
        ("8Ei", "beyond the largest quantity Kubernetes holds"),
        (2**63, "beyond the largest quantity Kubernetes holds"),
        (-(2**63), "beyond the largest quantity Kubernetes holds"),
        (1e300, "beyond the largest quantity Kubernetes holds"),
        (float("inf"), "must be a finite quantity"),
        (float("nan"), "must be a finite quantity"),
        ("1" * 65, "is 65 characters long; a quantity has at most 64"),
        ("9" * 5000, "is 5000 characters long"),
    ],
)
def test_a_quantity_beyond_the_bounds_is_refused_with_the_bound_named(
    value: object, words: str
) -> None:
    with pytest.raises(InvalidQuantity) as caught:
        parse_quantity(value, what="spec.nominal")
    assert str(caught.value).startswith("spec.nominal ")
    assert words in str(caught.value)


@pytest.mark.parametrize(
    ("value", "exact"),
    [
        ("9223372036854775807", Fraction(2**63 - 1)),
        (2**63 - 1, Fraction(2**63 - 1)),
        ("7Ei", Fraction(7 * 2**60)),
        ("1e18", Fraction(10**18)),
        ("1e-100", Fraction(1, 10**100)),
        ("1" * 18, Fraction(int("1" * 18))),
        ("0.5" + "0" * 61, Fraction(1, 2)),  # 64 characters: the longest read
    ],
)
def test_a_quantity_at_the_bounds_is_read(value: object, exact: Fraction) -> None:
    assert parse_quantity(value) == exact


def test_a_huge_exponent_costs_nothing() -> None:
    started = time.process_time()
    for _ in range(100):
        with pytest.raises(InvalidQuantity):
            parse_quantity("1e" + "9" * 60)
    assert time.process_time() - started < 5.0  # a hang guard: 10**(10**60) would never end


def _quota_spec() -> dict[str, Any]:
    crd = yaml.safe_load((CRDS / "gpuquota.yaml").read_text())
    spec: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
        "spec"
    ]
    return spec


def test_the_gpuquota_crd_bounds_match_the_code() -> None:
    spec = _quota_spec()
    fields = spec["properties"]
    for name in ("reclaimGracePeriodSeconds", "leaseTTLSeconds", "lendAfterIdleSeconds"):
        assert fields[name]["maximum"] == bounds.MAX_DURATION_S, name
    assert fields["budget"]["properties"]["windowSeconds"]["maximum"] == bounds.MAX_DURATION_S
    assert fields["budget"]["properties"]["limitHours"]["maximum"] == bounds.MAX_BUDGET_HOURS
    assert fields["maxPods"]["maximum"] == bounds.MAX_QUOTA_PODS
    gpus = f"quantity('{bounds.MAX_QUOTA_GPUS}')"
    by_field = [(r.get("fieldPath"), r["rule"]) for r in spec["x-kubernetes-validations"]]
    for name in ("nominal", "guaranteed", "borrowLimit", "lendLimit"):
        rule = fields[name]["x-kubernetes-validations"][0]["rule"]
        assert f"quantity('{bounds.MAX_QUOTA_MEMORY_TEXT}')" in rule, name
        assert f"size() <= {bounds.MAX_SETTING_CHARS}" in rule, name
        gpu_rules = [r for path, r in by_field if path == f".{name}" and gpus in r]
        assert gpu_rules, f"{name}: no bound in GPUs for resource gpu"
    compute = fields["computeLimit"]["x-kubernetes-validations"][0]["rule"]
    assert gpus in compute and f"size() <= {bounds.MAX_SETTING_CHARS}" in compute


def test_the_bounds_are_what_their_comments_say() -> None:
    assert bounds.MAX_QUOTA_BYTES == 2**60  # 1Ei
    assert bounds.MAX_DURATION_TEXT == "8784h"
    assert bounds.MAX_QUOTA_BYTES < bounds.MAX_QUANTITY
    assert bounds.MAX_QUOTA_GPUS * 1000 < 2**63
