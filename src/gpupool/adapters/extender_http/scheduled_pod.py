"""The pod kube-scheduler asks about, decoded once at the edge (the /filter and /prioritize body,
the bind's fresh read of the pod) into what every later step needs: who it is, its GPU request
(with its tenant and priority), its placement policy, the admission queue's record, the node it
is already bound to. Nothing further in reads the pod's JSON again.

A pod whose request cannot be read still decodes: `problem` holds the typed error's message, and
every node refuses the pod with it (kube-scheduler shows it to the user).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpupool.adapters.extender_http.refusal import Refusal, Why
from gpupool.adapters.wire.admitted import Admitted, read_admitted
from gpupool.adapters.wire.names import DEFAULT_TENANT, LABEL_TENANT
from gpupool.adapters.wire.pods import pod_name, read_pod_gpu
from gpupool.domain.errors import GpupoolError
from gpupool.domain.requests import Request


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
        return None

    @classmethod
    def from_json(cls, pod: Mapping[str, Any]) -> ScheduledPod:
        meta: Mapping[str, Any] = pod.get("metadata") or {}
        annotations: Mapping[str, str] = meta.get("annotations") or {}
        labels: Mapping[str, str] = meta.get("labels") or {}
        node_name = (pod.get("spec") or {}).get("nodeName")
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        uid, bound = str(meta.get("uid") or ""), str(node_name) if node_name else None
        try:
            gpu = read_pod_gpu(pod, tenant=labels.get(LABEL_TENANT) or DEFAULT_TENANT)
        except GpupoolError as err:
            bare = Request(name=pod_name(pod))
            return cls(namespace, name, uid, bare, node_name=bound, problem=str(err))
        if gpu is None:
            return cls(namespace, name, uid, Request(name=pod_name(pod)), node_name=bound)
        return cls(
            namespace,
            name,
            uid,
            gpu.request,
            policy=gpu.placement_policy,
            admitted=read_admitted(annotations),
            node_name=bound,
        )
