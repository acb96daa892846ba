"""The pod kube-scheduler asks about, as the extender reads it: gpupool's one decoded pod value
(`state.pods.PodView`, from `adapters.kubernetes.decoded.read_pod`, the one pod decoder,
remembered per uid and resourceVersion) with the request the extender plans. The /filter and
/prioritize body, the bind's fresh read of the pod and a gang's listed members all come through
that decoder; nothing here reads the pod's JSON.

A pod whose request cannot be read still decodes: `problem` holds the typed error's message, and
every node refuses the pod with it (kube-scheduler shows it to the user). A pod that asks for no
gpupool GPU (a DRA claim pod among them: the claim allocator places it) has a request whose
`wants_gpu` is False.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.adapters.extender_http.refusal import Refusal, Why
from gpupool.adapters.kubernetes.decoded import read_pod
from gpupool.adapters.wire.names import LABEL_TENANT
from gpupool.domain.compute_modes import WorkloadClass
from gpupool.domain.gang import GangMark
from gpupool.domain.requests import Request
from gpupool.state.admitted import Admitted
from gpupool.state.nodes import NodeObject
from gpupool.state.pods import NodeConstraints, PodView

NEVER_ADMITTED = Admitted(0.0)  # what a pod without a readable gpupool.io/admitted record holds


def _planned_request(view: PodView) -> Request:
    """The request the extender plans: the pod's own, else a bare one (`wants_gpu` False) for a
    pod that asks for no gpupool GPU by its resources or whose request cannot be read."""
    if view.request is not None and view.problem is None and not view.claim_pod:
        return view.request
    return Request(name=view.key if view.namespace else view.name or "?")


@dataclass(frozen=True, slots=True)
class ScheduledPod:
    view: PodView
    request: Request  # `wants_gpu` False: the pod asks for no gpupool GPU

    @classmethod
    def of(cls, view: PodView) -> ScheduledPod:
        return cls(view, _planned_request(view))

    @classmethod
    def from_json(cls, pod: Mapping[str, Any]) -> ScheduledPod:
        """The pod, through the one remembering decoder (a version seen before is not decoded
        again)."""
        return cls.of(read_pod(pod))

    @property
    def namespace(self) -> str:
        return self.view.namespace

    @property
    def name(self) -> str:
        return self.view.name

    @property
    def uid(self) -> str:
        return self.view.uid

    @property
    def node_name(self) -> str | None:
        """spec.nodeName: the node it is bound to already."""
        return self.view.node

    @property
    def problem(self) -> str | None:
        """Why its GPU request (or its gang) cannot be read."""
        return self.view.problem

    @property
    def policy(self) -> str | None:
        """gpupool.io/placement-policy (validated); None: the default."""
        return self.view.placement_policy

    @property
    def admitted(self) -> Admitted:
        return self.view.admitted or NEVER_ADMITTED

    @property
    def unadmitted(self) -> bool:
        """A tenant's pod (the webhook stamped gpupool.io/tenant, which the pod-integrity policy
        keeps) whose gpupool.io/admitted record is missing or unreadable: the admission queue
        never admitted it, so no node may take it (defence in depth behind that policy)."""
        return self.view.admitted is None and LABEL_TENANT in self.view.labels

    @property
    def constraints(self) -> NodeConstraints:
        return self.view.constraints

    @property
    def compute_mode(self) -> str | None:
        """gpupool.io/compute-mode: mps | none (validated at admission)."""
        return self.view.compute_mode

    @property
    def workload(self) -> WorkloadClass:
        return self.view.workload

    @property
    def gang(self) -> GangMark | None:
        """Its gang: placed only when every member fits (gang_bind)."""
        return self.view.gang

    @property
    def key(self) -> str:
        """The pod's identity for memos: its uid, else namespace/name."""
        return self.uid or f"{self.namespace}/{self.name}"

    @property
    def lease_key(self) -> str:
        """The key of the GpuLease bind makes for it (named after its uid, in its namespace)."""
        return f"{self.namespace}/{self.uid}"

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    def refusal(self) -> Refusal | None:
        """Why no node can take this pod whatever the cluster holds, or None."""
        if self.problem is not None:
            return Refusal(Why.BAD_REQUEST, self.problem)
        if not self.request.wants_gpu:
            return Refusal(Why.NO_GPU, f"pod {self.request.name} asks for no gpupool GPU")
        if self.unadmitted:
            return Refusal(
                Why.NOT_ADMITTED,
                f"pod {self.ref} has no valid gpupool.io/admitted record: gpupool's admission "
                f"queue never admitted it for its tenant (its gpupool.io/quota gate was removed "
                f"by someone else), so gpupool does not bind it",
            )
        return None

    def excluded_from(self, node: NodeObject) -> Refusal | None:
        """Why the pod's own spec (nodeSelector, required node affinity, taints it does not
        tolerate) excludes `node`, or None."""
        why = self.constraints.refusal(node)
        if why is None:
            return None
        return Refusal(Why.NODE_EXCLUDED, f"pod {self.ref} may not run on {node.name}: {why}")
