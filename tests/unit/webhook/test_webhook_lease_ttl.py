"""A pod's lease TTL at admission: a positive duration passes, a negative, zero or unreadable one
is refused with what to write instead (through the review, as the API server sees it)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpupool.adapters.webhook import policy
from gpupool.adapters.webhook.mutate import ClusterFacts, mutate_pod
from gpupool.adapters.webhook.review import parse_review, review_pod
from gpupool.adapters.wire.lease_terms import InvalidLeaseTtl, parse_ttl
from gpupool.domain.units import GiB

STAMP = "2026-01-02T03:04:05.000006Z"
CARDS = ClusterFacts(cards=(("A100-80GB", 72 * GiB),))


def _pod(ttl: str) -> dict[str, Any]:
    limits = {"cpu": "1", "gpupool.io/gpu-memory": "1Gi"}
    return {
        "metadata": {"name": "p", "namespace": "ns", "annotations": {"gpupool.io/lease-ttl": ttl}},
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
    }


@pytest.mark.parametrize(
    ("text", "seconds"), [("2h", 7200), ("90m", 5400), ("1h30m", 5400), ("45s", 45), ("1.5h", 5400)]
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_ttl(text) == seconds


@pytest.mark.parametrize("text", ["-1h", "0s", "2 hours", "", "h", "20", "1d", "1h-5m"])
def test_a_bad_ttl_is_refused_with_what_to_write(text: str) -> None:
    with pytest.raises(InvalidLeaseTtl) as caught:
        mutate_pod(_pod(text), {}, STAMP, CARDS)
    assert str(caught.value) == (
        "annotation gpupool.io/lease-ttl must be a positive duration such as 2h, 90m, 1h30m or "
        f"45s; got {text!r}"
    )


def test_the_review_denies_a_negative_ttl_in_our_words_and_passes_a_good_one() -> None:
    def answer(ttl: str) -> dict[str, Any]:
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                  "request": {"uid": "u1", "operation": "CREATE", "object": _pod(ttl)}}  # fmt: skip
        body = json.dumps(review).encode()
        response: dict[str, Any] = review_pod(parse_review(body), {}, STAMP, CARDS)["response"]
        return response

    denied = answer("-20s")
    assert denied["allowed"] is False
    assert "gpupool.io/lease-ttl must be a positive duration" in denied["status"]["message"]
    assert answer("20s")["allowed"] is True


def test_the_policy_lets_only_the_pods_tenant_change_the_renewal() -> None:
    rules = policy.policy()["spec"]["validations"]
    (renewal,) = [r for r in rules if "gpupool.io/renew" in r["expression"]]
    expression = renewal["expression"]
    assert expression.startswith("request.operation != 'UPDATE' || ")
    assert "'-developers') in request.userInfo.groups" in expression
    assert "startsWith('system:serviceaccount:' + request.namespace + ':')" in expression
    assert renewal["reason"] == "Forbidden"
