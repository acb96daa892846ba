"""The webhook configurations that make the apiserver call the webhook, and applying them.

`configurations` is pure: the Mutating- and ValidatingWebhookConfiguration objects for a webhook
reachable at `url` (an https URL the apiserver can dial, e.g. https://127.0.0.1:9443 in the dev
cluster) or at an in-cluster Service, with the CA bundle that signed its serving certificate.
Pods are mutated on create; GpuQuotas are validated on create and update (pod updates are the
pod-integrity policy's, `policy.py`, which needs no webhook).

The API server sends a pod to the webhook only when it concerns gpupool (`pod_condition`, CEL):
a container asks for a gpupool.io resource or one of HAMi's (`hami.py`: gpupool translates them)
or, while the webhook adopts NVIDIA's names (`adopt_nvidia_gpu`, the default), for
`nvidia.com/gpu` or an `nvidia.com/mig-*` profile (which it refuses), or the pod carries a
gpupool.io or HAMi annotation or the quota gate. Every other pod is created without a call, so a
webhook outage never blocks them (with `--no-adopt-nvidia-gpu`, a pod asking only for
`nvidia.com/gpu`, NVIDIA's device plugin's resource, included). For the pods it does get the
failure policy is
Fail (a GPU pod that slipped past the webhook would skip its quota), and the webhook's name,
which the API server quotes when it cannot call it, says why they wait:
`failed calling webhook "gpu-pods-need-the-gpupool-webhook.gpupool.io"`.
Namespaces `kube-system` and the webhook's own are never sent to it, so a webhook that is down
cannot block its own restart.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lightkube import AsyncClient, codecs
from lightkube.core.exceptions import ApiError
from lightkube.resources.admissionregistration_v1 import (
    MutatingWebhookConfiguration,
    ValidatingWebhookConfiguration,
)

from gpupool.adapters.webhook import hami
from gpupool.adapters.webhook.server import MUTATE_PODS, VALIDATE_QUOTAS
from gpupool.adapters.wire import names

NAME = "gpupool"
FIELD_MANAGER = "gpupool-webhook"
POD_WEBHOOK = names.WEBHOOK_PODS
QUOTA_WEBHOOK = names.WEBHOOK_QUOTAS


def _cel_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


# A resource or annotation key that concerns gpupool: its own, or HAMi's, which it translates.
_OURS_OR_HAMI_ANNOTATION = (
    f"k.startsWith('{names.GROUP}/') || k in {_cel_list(hami.HAMI_ANNOTATIONS)}"
)


def _resource(adopt_nvidia_gpu: bool) -> str:
    """CEL: a resource name `r` that concerns gpupool: its own, HAMi's and, when it adopts
    NVIDIA's names, nvidia.com/gpu and the MIG profiles."""
    if adopt_nvidia_gpu:
        return (
            f"r.startsWith('{names.GROUP}/') || r in {_cel_list((*hami.HAMI_RESOURCES, hami.GPU))}"
            f" || r.startsWith('{hami.MIG_PREFIX}')"
        )
    return f"r.startsWith('{names.GROUP}/') || r in {_cel_list(hami.HAMI_RESOURCES)}"


def _asks(containers: str, adopt_nvidia_gpu: bool) -> str:
    """CEL: a container of `containers` (a list field of the pod) asks for a resource that
    concerns gpupool (`_resource`)."""
    resource = _resource(adopt_nvidia_gpu)
    return (
        f"(has(object.spec.{containers}) && object.spec.{containers}.exists(c, "
        f"has(c.resources) && ("
        f"(has(c.resources.limits) && c.resources.limits.exists(r, {resource}))"
        f" || (has(c.resources.requests) && "
        f"c.resources.requests.exists(r, {resource})))))"
    )


def pod_condition(adopt_nvidia_gpu: bool = True) -> dict[str, str]:
    """The matchCondition for the pods the webhook is called for: what gpupool reads or writes
    on a pod at creation."""
    return {
        "name": "concerns-gpupool",
        "expression": " || ".join(
            (
                _asks("containers", adopt_nvidia_gpu),
                _asks("initContainers", adopt_nvidia_gpu),
                f"(has(object.metadata.annotations) && "
                f"object.metadata.annotations.exists(k, {_OURS_OR_HAMI_ANNOTATION}))",
                f"(has(object.spec.schedulingGates) && "
                f"object.spec.schedulingGates.exists(g, g.name == '{names.QUOTA_GATE}'))",
                # a claim may be on gpu.gpupool.io: the webhook reads it to know (claims.py)
                "(has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0)",
            )
        ),
    }


POD_CONDITION = pod_condition()  # the default: NVIDIA's names adopted


@dataclass(frozen=True, slots=True)
class Target:
    """Where the apiserver reaches the webhook: a URL, or a Service (namespace, name, port)."""

    url: str | None = None
    service: tuple[str, str, int] | None = None

    def client_config(self, path: str, ca_bundle: bytes) -> dict[str, Any]:
        config: dict[str, Any] = {"caBundle": base64.b64encode(ca_bundle).decode("ascii")}
        if self.url is not None:
            config["url"] = self.url.rstrip("/") + path
        elif self.service is not None:
            namespace, service, port = self.service
            config["service"] = {
                "namespace": namespace,
                "name": service,
                "port": port,
                "path": path,
            }
        else:
            raise ValueError("a webhook target needs a url or a service")
        return config


@dataclass(frozen=True, slots=True)
class Registration:
    target: Target
    ca_bundle: bytes
    name: str = NAME
    skip_namespaces: tuple[str, ...] = ("kube-system",)
    # Only namespaces with these labels are sent to the webhook (tests use it to stay apart).
    namespace_labels: Mapping[str, str] = field(default_factory=dict)
    timeout_s: int = 10
    # Send pods asking for nvidia.com/gpu (or a MIG profile) to the webhook (`hami.py`).
    adopt_nvidia_gpu: bool = True


def _namespace_selector(reg: Registration) -> dict[str, Any]:
    selector: dict[str, Any] = {
        "matchExpressions": [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": list(reg.skip_namespaces),
            }
        ]
    }
    if reg.namespace_labels:
        selector["matchLabels"] = dict(reg.namespace_labels)
    return selector


def _webhook(
    reg: Registration, name: str, path: str, rule: dict[str, Any], namespaced: bool
) -> dict[str, Any]:
    hook: dict[str, Any] = {
        "name": name,
        "clientConfig": reg.target.client_config(path, reg.ca_bundle),
        "rules": [rule],
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": "Fail",
        "timeoutSeconds": reg.timeout_s,
    }
    if namespaced:
        hook["namespaceSelector"] = _namespace_selector(reg)
    return hook


def configurations(reg: Registration) -> list[dict[str, Any]]:
    pods_create = {
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "operations": ["CREATE"],
        "resources": ["pods"],
        "scope": "Namespaced",
    }
    quotas = {
        "apiGroups": [names.GROUP],
        "apiVersions": [names.VERSION],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["gpuquotas"],
        "scope": "Cluster",
    }
    mutating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": reg.name},
        "webhooks": [
            {
                **_webhook(reg, POD_WEBHOOK, MUTATE_PODS, pods_create, True),
                "matchConditions": [pod_condition(reg.adopt_nvidia_gpu)],
                "reinvocationPolicy": "IfNeeded",
            }
        ],
    }
    validating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": reg.name},
        "webhooks": [
            _webhook(reg, QUOTA_WEBHOOK, VALIDATE_QUOTAS, quotas, False),
        ],
    }
    return [mutating, validating]


async def apply(client: AsyncClient, reg: Registration) -> None:
    """Create or update both configurations (server-side apply)."""
    for config in configurations(reg):
        await client.apply(codecs.from_dict(config), field_manager=FIELD_MANAGER, force=True)


async def unregister(client: AsyncClient, name: str = NAME) -> None:
    for kind in (MutatingWebhookConfiguration, ValidatingWebhookConfiguration):
        try:
            await client.delete(kind, name)
        except ApiError as err:
            if err.status.code != 404:
                raise
