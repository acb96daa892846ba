"""The GpuLease after the Binding (issue 24): the extender answers kube-scheduler once the Binding
stands and creates the pod's lease after it. Between the two, the pod's own
`gpupool.io/allocation` is the record of what it holds. This kills the extender in that window
and shows that no card is double-booked: the restarted extender counts the bound pod's slices
from its annotations, and the controller makes the lease from them once it can.

The window is held open on purpose: a ValidatingAdmissionPolicy refuses every GpuLease create
while the first pod is bound, so its lease cannot exist when the extender is killed.

One cluster for this module (`gpupool dev-cluster up` with gpupool on top: extender, webhook,
controller), one kwok node with ONE A100-80GB (72Gi allocatable).
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from support.builders import pod_json
from support.scheduler_metrics import unschedulable_attempts
from support.waiting import wait_until

from gpupool.adapters.kubernetes.audit import read_cluster
from gpupool.adapters.kubernetes.lease import lease_to_json
from gpupool.devcluster import ClusterSpec, DevCluster
from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.errors import ApiError
from gpupool.devcluster.nodes import node_specs, parse_gpu_spec
from gpupool.devcluster.spec import GpupoolSpec
from gpupool.domain.allocations import Slice
from gpupool.domain.units import GiB
from gpupool.state.lease import LeaseRecord, PodRef

pytestmark = pytest.mark.e2e

GROUP = "/apis/gpupool.io/v1alpha1"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
POLICY = "e2e-hold-gpulease-creates"
NODE = "gpu-node-0"
SPEC = GpupoolSpec(policy="binpack", heartbeat_s=1.0, controller_resync_s=1.0)


@dataclass(frozen=True)
class Cluster:
    cluster: DevCluster
    api: KubeApi

    def pod(self, ns: str, name: str) -> dict[str, Any]:
        got: dict[str, Any] = self.api.get(f"/api/v1/namespaces/{ns}/pods/{name}")
        return got

    def events(self, ns: str, pod: str) -> list[dict[str, Any]]:
        path = f"/api/v1/namespaces/{ns}/events?fieldSelector=involvedObject.name%3D{pod}"
        items: list[dict[str, Any]] = self.api.get(path)["items"]
        return items

    def tail(self) -> str:
        logs = [p for p in self.cluster.logs() if p.name.startswith("gpupool-")]
        return "\n".join(
            f"--- {p.name}\n" + "\n".join(p.read_text().splitlines()[-25:]) for p in logs
        )


@pytest.fixture(scope="module")
def one_card(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = DevCluster(tmp_path_factory.mktemp("lease-after-binding") / "cluster")
    spec = ClusterSpec(nodes=tuple(node_specs(1, parse_gpu_spec("1xA100-80GB"))), gpupool=SPEC)
    cluster.up(spec, die_with_parent=True)
    try:
        yield Cluster(cluster, cluster.api())
    finally:
        cluster.down()


def _hold_lease_creates(api: KubeApi) -> None:
    """Refuse every GpuLease create (the extender's and the controller's restore alike)."""
    rules = [
        {
            "apiGroups": ["gpupool.io"],
            "apiVersions": ["*"],
            "operations": ["CREATE"],
            "resources": ["gpuleases"],
        }
    ]
    api.create(
        f"{ADMISSION}/validatingadmissionpolicies",
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": POLICY},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": rules},
                "validations": [{"expression": "false", "message": "e2e: GpuLease creates held"}],
            },
        },
    )
    api.create(
        f"{ADMISSION}/validatingadmissionpolicybindings",
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": POLICY},
            "spec": {"policyName": POLICY, "validationActions": ["Deny"]},
        },
    )


def _release_lease_creates(api: KubeApi) -> None:
    for kind in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
        try:
            api.request("DELETE", f"{ADMISSION}/{kind}/{POLICY}", None)
        except ApiError as err:
            if err.status != 404:
                raise


def _probe_refused(api: KubeApi, ns: str) -> bool:
    """A GpuLease create is refused now (the policy is in force): a probe lease on no node."""
    probe = LeaseRecord(
        name=f"probe-{secrets.token_hex(3)}",
        namespace=ns,
        tenant="default",
        pod=PodRef(ns, "probe", "probe"),
        node="no-such-node",
        slices=(Slice(0, "GPU-none", "A100-80GB", 0, GiB, 0),),
        amount=GiB,
    )
    try:
        api.create(f"{GROUP}/namespaces/{ns}/gpuleases", lease_to_json(probe))
    except ApiError as err:
        return "e2e: GpuLease creates held" in str(err)
    api.request("DELETE", f"{GROUP}/namespaces/{ns}/gpuleases/{probe.name}", None)
    return False


def _lease(api: KubeApi, ns: str, uid: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = api.find(f"{GROUP}/namespaces/{ns}/gpuleases/{uid}")
    return found


def _ranges(pod: dict[str, Any]) -> list[tuple[str, int, int]]:
    """The (card, start, end) byte ranges the pod's allocation annotation holds."""
    out = []
    for device in json.loads(pod["metadata"]["annotations"]["gpupool.io/allocation"]):
        for extent in device.get("extents") or [device]:
            start = extent["offsetBytes"]
            out.append((device["uuid"], start, start + extent["sizeBytes"]))
    return out


def test_an_extender_killed_between_binding_and_lease_double_books_nothing(
    one_card: Cluster,
) -> None:
    c = one_card
    api = c.api
    ns = f"lab-{secrets.token_hex(3)}"
    api.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
    )
    _hold_lease_creates(api)
    try:
        wait_until(lambda: _probe_refused(api, ns), 60, "the policy refusing GpuLease creates")

        # a: bound with its allocation on it; its lease cannot be created
        api.create(f"/api/v1/namespaces/{ns}/pods", pod_json("a", gpu_memory="40Gi", grace_s=0))
        wait_until(
            lambda: (
                "gpupool.io/allocation" in c.pod(ns, "a")["metadata"].get("annotations", {})
                and c.pod(ns, "a")["spec"].get("nodeName")
            ),
            90,
            lambda: f"pod a bound with its allocation\n{c.tail()}",
        )
        a = c.pod(ns, "a")
        assert _lease(api, ns, a["metadata"]["uid"]) is None  # the window: bound, no lease

        # the extender dies in that window, and comes back with nothing in memory
        state = c.cluster.load_state()
        assert state is not None
        [extender] = [p for p in state.processes if p.name == "gpupool-extender"]
        os.kill(extender.pid, signal.SIGKILL)
        c.cluster.restart("gpupool-extender")

        # b (40Gi) would land on a's bytes (40 + 40 > 72Gi): refused, again and again
        api.create(f"/api/v1/namespaces/{ns}/pods", pod_json("b", gpu_memory="40Gi", grace_s=0))

        def refused() -> bool:
            return any(e["reason"] == "FailedScheduling" for e in c.events(ns, "b"))

        wait_until(refused, 90, lambda: f"a refusal of pod b\n{c.tail()}")
        first = unschedulable_attempts(state.ports["kube-scheduler"])
        # c (24Gi) fits beside a: bound, on bytes a does not hold
        api.create(f"/api/v1/namespaces/{ns}/pods", pod_json("c", gpu_memory="24Gi", grace_s=0))
        wait_until(
            lambda: c.pod(ns, "c")["spec"].get("nodeName"),
            90,
            lambda: f"pod c bound\n{c.tail()}",
        )
        api.patch(f"/api/v1/nodes/{NODE}", {"metadata": {"labels": {"e2e-poke": ns}}})
        wait_until(
            lambda: (
                c.pod(ns, "b")["spec"].get("nodeName")
                or unschedulable_attempts(state.ports["kube-scheduler"]) > first
            ),
            90,
            "kube-scheduler's next try of pod b",
        )
        assert not c.pod(ns, "b")["spec"].get("nodeName"), "pod b landed on a's bytes"
        ranges = sorted(_ranges(a) + _ranges(c.pod(ns, "c")))
        for (card, _, end), (card2, start, _) in itertools.pairwise(ranges):
            assert card != card2 or end <= start, f"slices overlap: {ranges}"
    finally:
        _release_lease_creates(api)

    # creates allowed again: the controller makes the missing leases from the pods' allocations
    for name in ("a", "c"):
        uid = c.pod(ns, name)["metadata"]["uid"]
        lease = wait_until(
            lambda u=uid: _lease(api, ns, u), 90, lambda n=name: f"{n}'s lease\n{c.tail()}"
        )
        allocation = c.pod(ns, name)["metadata"]["annotations"]["gpupool.io/allocation"]
        assert lease["spec"]["devices"] == json.loads(allocation)
    audit = read_cluster(api.get, ns)
    assert not audit.of_kind("overcommit", "offset-overlap", "two-leases"), str(audit)
    assert not c.pod(ns, "b")["spec"].get("nodeName"), "pod b landed on a's bytes"
