"""Gang admission end to end: the webhook checks each member, `gpupool controller` admits the
gang whole, the real kube-scheduler calls `gpupool extender`, which places every member.

A tenant with a 48Gi quota runs a 12Gi pod. A gang of four 12Gi pods arrives: while only three
of its members exist they wait at the gate with "3 of 4 members created"; with the fourth they
still wait, since only three fit the quota ("needs 48Gi for its 4 waiting members; ... room for
3 of them now (36Gi)"), and none is admitted. Bad members are denied on create: a fifth member,
one that disagrees on the size, a size of 0. Once the 12Gi pod is gone the four are admitted in
one round (the same `at` in every `gpupool.io/admitted` record) and all run.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from process_stack import (
    GROUP,
    LIVE,
    Stack,
    pod_annotations,
    pod_events,
    pod_get,
    pod_running,
    process_stack,
)
from support.builders import pod_json
from support.waiting import wait_until

from gpupool.devcluster.errors import ApiError
from gpupool.devcluster.polling import poll_until

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with process_stack(tmp_path_factory.mktemp("gang-e2e"), "8xA100-80GB", "gang") as s:
        yield s


def _tenant(s: Stack, nominal: str) -> str:
    tenant = f"gang-{secrets.token_hex(3)}"
    s.api.create(
        f"{GROUP}/gpuquotas",
        {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": "GpuQuota",
            "metadata": {"name": tenant},
            "spec": {"nominal": nominal},
        },
    )
    labels = {s.selector[0]: s.selector[1], "gpupool.io/tenant": tenant}
    s.api.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": tenant, "labels": labels}},
    )
    return tenant


def member(name: str, gang: str = "train", size: str = "4") -> dict[str, Any]:
    return pod_json(
        name,
        gpu_memory="12Gi",
        grace_s=0,
        labels={"gpupool.io/gang": gang},
        annotations={"gpupool.io/gang-size": size},
    )


def _note(s: Stack, ns: str, name: str) -> str:
    return pod_annotations(pod_get(s.api, ns, name) or {"metadata": {}}).get("gpupool.io/queue", "")


def _gated(s: Stack, ns: str, name: str) -> bool:
    pod = pod_get(s.api, ns, name) or {}
    return {"name": "gpupool.io/quota"} in (pod.get("spec") or {}).get("schedulingGates", [])


def _denied(s: Stack, ns: str, pod: dict[str, Any]) -> str:
    with pytest.raises(ApiError) as caught:
        s.api.create(f"/api/v1/namespaces/{ns}/pods", pod)
    assert caught.value.status in (400, 422), caught.value
    return str(caught.value)


def test_a_gang_of_four_waits_while_three_fit_then_all_four_run_together(stack: Stack) -> None:
    api = stack.api
    ns = _tenant(stack, "48Gi")
    pods = f"/api/v1/namespaces/{ns}/pods"
    api.create(pods, pod_json("blocker", gpu_memory="12Gi", grace_s=0))
    assert poll_until(lambda: pod_running(api, ns, "blocker"), timeout_s=30), stack.tail()

    for i in range(3):
        api.create(pods, member(f"w-{i}"))
    incomplete = "gang 'NS/train': 3 of 4 members created; it is admitted once all 4 exist"
    incomplete = incomplete.replace("NS", ns)
    wait_until(
        lambda: all(incomplete in _note(stack, ns, f"w-{i}") for i in range(3)),
        30,
        "the three members waiting for the fourth",
    )
    assert any(e["reason"] == "Queued" for e in pod_events(api, ns, "w-0"))

    api.create(pods, member("w-3"))
    short = (
        f"gang '{ns}/train' needs 48Gi for its 4 waiting members; tenant '{ns}''s quota has "
        f"room for 3 of them now (36Gi)"
    )
    wait_until(
        lambda: all(short in _note(stack, ns, f"w-{i}") for i in range(4)),
        30,
        "the whole gang waiting for quota",
    )
    assert all(_gated(stack, ns, f"w-{i}") for i in range(4))  # none admitted alone

    # bad members, each with its own message
    assert "already has its 4 member(s) (w-0, w-1, w-2, w-3)" in _denied(stack, ns, member("w-4"))
    assert "' says 4; every member of a gang carries the same size" in _denied(
        stack, ns, member("odd", size="3")
    )
    assert "a gang has at least one pod" in _denied(stack, ns, member("zero", "other", "0"))
    assert "never spans namespaces or tenants" in _denied(stack, ns, member("far", "team-b/train"))

    api.delete(f"{pods}/blocker")
    wait_until(
        lambda: all(pod_running(api, ns, f"w-{i}") for i in range(4)),
        60,
        "all four members running",
    )
    records = [
        json.loads(pod_annotations(pod_get(api, ns, f"w-{i}") or {})["gpupool.io/admitted"])
        for i in range(4)
    ]
    assert len({r["at"] for r in records}) == 1, records  # one round admitted them all
    leases = api.get(f"{GROUP}/namespaces/{ns}/gpuleases")["items"]
    live = [x for x in leases if (x.get("status") or {}).get("phase") in LIVE]
    assert len(live) == 4, leases  # the blocker's lease has ended
