"""The DRA driver serves only on a runtime that applies CDI devices (`node.dra.runtime`)."""

from __future__ import annotations

import pytest

from gpupool.node.dra.runtime import cdi_refusal


@pytest.mark.parametrize(
    "runtime", ["containerd://2.0.0", "containerd://2.4.2", "containerd://v2.1.3-k3s1",
                "cri-o://1.23.0", "cri-o://1.31.4"],
)  # fmt: skip
def test_runtimes_that_apply_cdi_by_default_are_served(runtime: str) -> None:
    assert cdi_refusal(runtime) is None


def test_containerd_1_7_is_refused_because_its_cdi_switch_cannot_be_seen() -> None:
    why = cdi_refusal("containerd://1.7.24")
    assert why is not None and "enable_cdi" in why and "containerd 2.0" in why


@pytest.mark.parametrize(
    ("runtime", "says"),
    [("containerd://1.6.20", "does not apply CDI"), ("cri-o://1.22.1", "does not apply CDI"),
     ("docker://24.0.7", "not one gpupool knows"), ("kwok-v0.8.0", "not one gpupool knows"),
     ("", "not one gpupool knows"), ("containerd://dev", "cannot be read")],
)  # fmt: skip
def test_other_runtimes_are_refused_naming_what_is_needed(runtime: str, says: str) -> None:
    why = cdi_refusal(runtime)
    assert why is not None and says in why
