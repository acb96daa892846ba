"""The pod kube-scheduler asks about, decoded once at the edge (the /filter and /prioritize body,
the bind's fresh read of the pod) into what every later step needs: who it is, its GPU request
(with its tenant and priority), its placement policy, the admission queue's record, the node it
is already bound to, its compute mode and class (for the lease's `computeMode`). Nothing further
in reads the pod's JSON again.

A pod whose request cannot be read still decodes: `problem` holds the typed error's message, and
every node refuses the pod with it (kube-scheduler shows it to the user).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpupool.adapters.extender_http.refusal import Refusal, Why
from gpupool.adapters.kubernetes.pod_view import read_constraints
from gpupool.adapters.wire.admitted import Admitted, parse_admitted, read_admitted
from gpupool.adapters.wire.gangs import read_gang
from gpupool.adapters.wire.names import ANN_ADMITTED, DEFAULT_TENANT, LABEL_TENANT
from gpupool.adapters.wire.pods import pod_name, read_pod_gpu
from gpupool.domain.compute_modes import WorkloadClass
from gpupool.domain.errors import GpupoolError
from gpupool.domain.gang import GangMark
from gpupool.domain.requests import Request
from gpupool.state.nodes import NodeObject
from gpupool.state.pods import NodeConstraints


@dataclass(frozen=True, slots=True)
class ScheduledPod:
    namespace: str
    name: str
    uid: str
    request: Request  # `wants_gpu` False: the pod asks for no gpupool GPU
    policy: str | None = None  # gpupool.io/placement-policy (validated), None: the default
    admitted: Admitted = field(default_factory=lambda: Admitted(0.0))
    node_name: str | None = None  # spec.nodeName: the node it is bound to already
    problem: str | None = None  # why its GPU request cannot be read
    # A tenant's pod (the webhook stamped gpupool.io/tenant, which the pod-integrity policy
    # keeps) whose gpupool.io/admitted record is missing or unreadable: the admission queue
    # never admitted it, so no node may take it (defence in depth behind that policy).
    unadmitted: bool = False
    constraints: NodeConstraints = field(default_factory=NodeConstraints)
    compute_mode: str | None = None  # gpupool.io/compute-mode: mps | none (validated at admission)
    workload: WorkloadClass = WorkloadClass.INFERENCE  # gpupool.io/workload
    gang: GangMark | None = None  # its gang: placed only when every member fits (gang_bind)

    @property
    def key(self) -> str:
        """The pod's identity for memos: its uid, else namespace/name."""
        return self.uid or f"{self.namespace}/{self.name}"

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

    @classmethod
    def from_json(cls, pod: Mapping[str, Any]) -> ScheduledPod:
        meta: Mapping[str, Any] = pod.get("metadata") or {}
        annotations: Mapping[str, str] = meta.get("annotations") or {}
        labels: Mapping[str, str] = meta.get("labels") or {}
        spec: Mapping[str, Any] = pod.get("spec") or {}
        node_name = spec.get("nodeName")
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        uid, bound = str(meta.get("uid") or ""), str(node_name) if node_name else None
        try:
            gpu = read_pod_gpu(pod, tenant=labels.get(LABEL_TENANT) or DEFAULT_TENANT)
            gang = read_gang(meta)
        except GpupoolError as err:
            bare = Request(name=pod_name(pod))
            return cls(namespace, name, uid, bare, node_name=bound, problem=str(err))
        if gpu is None:
            return cls(namespace, name, uid, Request(name=pod_name(pod)), node_name=bound)
        tenant_pod = LABEL_TENANT in labels
        return cls(
            namespace,
            name,
            uid,
            gpu.request,
            policy=gpu.placement_policy,
            admitted=read_admitted(annotations),
            node_name=bound,
            unadmitted=tenant_pod and parse_admitted(annotations.get(ANN_ADMITTED)) is None,
            constraints=read_constraints(spec),
            compute_mode=gpu.compute_mode,
            workload=WorkloadClass.parse(gpu.workload or WorkloadClass.INFERENCE.value),
            gang=gang,
        )
