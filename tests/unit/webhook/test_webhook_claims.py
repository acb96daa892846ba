"""Claim pods at the webhook: a pod whose ResourceClaim (template) is on gpu.gpupool.io gets the
tenant, the quota gate and its ask like any GPU pod; bad claims are refused naming the fix;
other drivers' claims pass untouched. The server looks the claims up through `Lookups`."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Mapping
from typing import Any

import aiohttp
import pytest

from gpupool.adapters.webhook.claims import TEMPLATE, PodClaim, claim_refs
from gpupool.adapters.webhook.mutate import ClusterFacts, mutate_pod
from gpupool.adapters.webhook.server import MUTATE_PODS, build_app
from gpupool.adapters.wire import names
from gpupool.adapters.wire.claim_request import from_annotation
from gpupool.adapters.wire.claims import ClaimRefused, MemoryAboveEveryCard
from gpupool.domain.errors import InvalidRequest
from gpupool.domain.units import GiB
from gpupool.quota.spec import TenantQuota

STAMP = "2026-01-02T03:04:05.000006Z"
CARDS = (("A100-80GB", 72 * GiB),)


def template(memory: str = "12Gi", cls: str = "gpu.gpupool.io") -> dict[str, Any]:
    return {
        "devices": {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {
                        "deviceClassName": cls,
                        "capacity": {"requests": {"memory": memory, "compute": "30"}},
                    },
                }
            ]
        }
    }


def pod(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "infer", "namespace": "team-a"},
        "spec": {
            "containers": [{"name": "c", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "a100-12gi"}],
            **spec,
        },
    }


def facts(spec: Mapping[str, Any] | None) -> ClusterFacts:
    return ClusterFacts(cards=CARDS, claims=(PodClaim("gpu", TEMPLATE, "a100-12gi", spec),))


def patched(patch: list[dict[str, Any]]) -> dict[str, Any]:
    return {op["path"]: op["value"] for op in patch}


def test_claim_refs_reads_templates_and_named_claims() -> None:
    obj = pod()
    obj["spec"]["resourceClaims"].append({"name": "x", "resourceClaimName": "shared"})
    refs = claim_refs(obj)
    assert [(r.entry, r.kind, r.name) for r in refs] == [
        ("gpu", "ResourceClaimTemplate", "a100-12gi"),
        ("x", "ResourceClaim", "shared"),
    ]


def test_a_claim_pod_is_gated_labelled_and_carries_its_ask() -> None:
    mutation = mutate_pod(pod(), {names.LABEL_TENANT: "team-a"}, STAMP, facts(template()))
    got = patched(mutation.patch)
    assert mutation.tenant == "team-a" and mutation.claim is not None
    assert got["/metadata/labels"] == {names.LABEL_TENANT: "team-a"}
    assert got["/spec/schedulingGates"] == [{"name": names.QUOTA_GATE}]
    annotations = got["/metadata/annotations"]
    assert annotations[names.ANN_QUEUED_AT] == STAMP
    ask = from_annotation(annotations[names.ANN_CLAIM], "p")
    assert (ask.memory_bytes, ask.compute_pct, ask.count) == (12 * GiB, 30, 1)
    # no extended resource: the card comes through the claim
    assert not any("resources" in path for path in got)


def test_a_reinvocation_keeps_the_webhooks_own_annotations() -> None:
    first = mutate_pod(pod(), {}, STAMP, facts(template()))
    again = pod(schedulingGates=[{"name": names.QUOTA_GATE}])
    again["metadata"]["annotations"] = patched(first.patch)["/metadata/annotations"]
    second = mutate_pod(again, {}, STAMP, facts(template()))
    assert patched(second.patch)["/spec/schedulingGates"] == [{"name": names.QUOTA_GATE}]


def test_a_user_cannot_write_the_ask_on_a_pod_without_a_claim() -> None:
    obj = pod()
    del obj["spec"]["resourceClaims"]
    obj["metadata"]["annotations"] = {names.ANN_CLAIM: "{}"}
    with pytest.raises(InvalidRequest, match="written by gpupool"):
        mutate_pod(obj, {}, STAMP, ClusterFacts(cards=CARDS))


def test_bad_claims_are_refused_naming_the_fix() -> None:
    with pytest.raises(MemoryAboveEveryCard, match="at most 72Gi"):
        mutate_pod(pod(), {}, STAMP, facts(template("100Gi")))
    with pytest.raises(ClaimRefused, match="does not exist; create it before the pod"):
        mutate_pod(pod(), {}, STAMP, facts(None))
    with pytest.raises(InvalidRequest, match=r"spec\.schedulerName"):
        mutate_pod(pod(schedulerName="other"), {}, STAMP, facts(template()))


def test_other_drivers_claims_pass_unchanged() -> None:
    mutation = mutate_pod(pod(), {}, STAMP, facts(template(cls="nic.example.com")))
    assert mutation.patch == [] and mutation.tenant is None


class Lookups:
    """The webhook's `Lookups` (our interface) with one template in namespace team-a."""

    def __init__(self, spec: Mapping[str, Any] | None) -> None:
        self.spec = spec
        self.asked: list[tuple[str, str, str]] = []

    async def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        return {names.LABEL_TENANT: "team-a"}

    async def quotas(self) -> list[TenantQuota]:
        return []

    async def cards(self) -> tuple[tuple[str, int], ...]:
        return CARDS

    async def gang_members(self, namespace: str, gang: str) -> list[Mapping[str, Any]]:
        return []

    async def lease_ttl(self, tenant: str) -> float | None:
        return None

    async def claim_spec(self, namespace: str, kind: str, name: str) -> Mapping[str, Any] | None:
        self.asked.append((namespace, kind, name))
        return self.spec


def _answer(lookups: Lookups) -> dict[str, Any]:
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u1", "operation": "CREATE", "namespace": "team-a", "object": pod()},
    }

    async def run() -> dict[str, Any]:
        app = build_app(lookups, lambda: 1_767_225_600.0)  # type: ignore[arg-type]
        runner = aiohttp.web.AppRunner(app)
        await runner.setup()
        site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            async with aiohttp.ClientSession() as session:
                url = f"http://127.0.0.1:{port}{MUTATE_PODS}"
                async with session.post(url, data=json.dumps(review)) as resp:
                    body: dict[str, Any] = await resp.json()
                    return body
        finally:
            await runner.cleanup()

    return asyncio.run(run())["response"]


def test_the_server_reads_the_template_and_answers_with_the_gate() -> None:
    lookups = Lookups(template())
    response = _answer(lookups)
    assert lookups.asked == [("team-a", "ResourceClaimTemplate", "a100-12gi")]
    assert response["allowed"] is True
    patch = json.loads(base64.b64decode(response["patch"]))
    assert patched(patch)["/spec/schedulingGates"] == [{"name": names.QUOTA_GATE}]


def test_the_server_refuses_a_claim_above_every_card() -> None:
    response = _answer(Lookups(template("100Gi")))
    assert response["allowed"] is False
    assert "ask for at most 72Gi" in response["status"]["message"]
