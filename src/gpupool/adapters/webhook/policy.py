"""The ValidatingAdmissionPolicy that keeps gpupool's marks on pods gpupool's own (pure).

Only gpupool's controller and extender (and cluster admins, `system:masters`, who could delete
the policy anyway and need a way to repair a stuck pod) may remove the quota scheduling gate or
set, change or remove the annotations gpupool writes (`names.SYSTEM_ANNOTATIONS`); nobody may
change a pod's tenant label once it is set. A tenant who could do either would skip its quota
(an open gate), jump the queue (`queued-at`) or claim another pod's card (`allocation`, `lease`).

The rule is CEL that the API server evaluates itself, so it holds while gpupool's webhook is down.
On CREATE it lets `queued-at` through: the mutating webhook (which runs before validation)
stamps it, and overwrites any value the user wrote; and `claim` on a pod with
`spec.resourceClaims`, which the webhook stamps (or refuses) the same way, whoever creates the
pod (a ReplicaSet too). Pods that carry no gpupool mark, before or after, never match, so an
error in this policy can never block another pod.

`objects()` is what deploy/policies/pod-integrity.yaml holds (tests/unit/webhook checks it).
"""

from __future__ import annotations

import json
from typing import Any

from gpupool.adapters.wire import names

NAME = "gpupool-pod-integrity"
NAMESPACE = "gpupool-system"
# The ServiceAccounts of deploy/rbac whose writes these marks are.
WRITERS = ("gpupool-controller", "gpupool-extender")
ADMINS_GROUP = "system:masters"


def writer_users(namespace: str = NAMESPACE) -> tuple[str, ...]:
    return tuple(f"system:serviceaccount:{namespace}:{account}" for account in WRITERS)


def _cel_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(json.dumps(v).replace('"', "'") for v in values) + "]"


def _marked(obj: str) -> str:
    """CEL: `obj` (object or oldObject) carries a gpupool annotation, the gate or the label."""
    return (
        f"(has({obj}.metadata.annotations) && "
        f"{obj}.metadata.annotations.exists(k, k.startsWith('{names.GROUP}/'))) || "
        f"(has({obj}.spec.schedulingGates) && "
        f"{obj}.spec.schedulingGates.exists(g, g.name == '{names.QUOTA_GATE}')) || "
        f"(has({obj}.metadata.labels) && '{names.LABEL_TENANT}' in {obj}.metadata.labels)"
    )


def _has_gate(obj: str) -> str:
    return (
        f"has({obj}.spec.schedulingGates) && "
        f"{obj}.spec.schedulingGates.exists(g, g.name == '{names.QUOTA_GATE}')"
    )


# The groups of a tenant's people: `<tenant>-developers`, as deploy/rbac/tenant.yaml binds them.
TENANT_GROUP_SUFFIX = "-developers"


def _renew_value(obj: str, annotated: str) -> str:
    key = names.ANN_RENEW
    value = f"{obj}.metadata.annotations['{key}']"
    return f"({annotated} && '{key}' in {obj}.metadata.annotations ? {value} : '')"


def _renewal_by_tenant() -> dict[str, Any]:
    """Only the pod's tenant renews its lease: its developers' group or a ServiceAccount of the
    pod's namespace (each namespace belongs to one tenant); gpupool and admins never match."""
    label = names.LABEL_TENANT
    tenant = f"oldObject.metadata.labels['{label}']"
    group = f"{tenant} + '{TENANT_GROUP_SUFFIX}'"
    return {
        "expression": (
            f"request.operation != 'UPDATE' || "
            f"{_renew_value('object', 'variables.newAnnotated')} == "
            f"{_renew_value('oldObject', 'variables.oldAnnotated')} || "
            f"request.userInfo.username.startsWith('system:serviceaccount:' + request.namespace "
            f"+ ':') || (has(oldObject.metadata.labels) && '{label}' in oldObject.metadata.labels "
            f"&& has(request.userInfo.groups) && ({group}) in request.userInfo.groups)"
        ),
        "messageExpression": (
            f"'annotation {names.ANN_RENEW} renews the GPU lease of the pod and only the tenant of "
            f"the pod writes it: a member of group ' + (has(oldObject.metadata.labels) && "
            f"'{label}' in oldObject.metadata.labels ? {group} : '<tenant>{TENANT_GROUP_SUFFIX}') "
            f"+ ' or a ServiceAccount of namespace ' + request.namespace + '; ' + "
            f"request.userInfo.username + ' is neither'"
        ),
        "reason": "Forbidden",
    }


def _gang_value(obj: str) -> str:
    """CEL: the pod's gang marks as one string ('' when it has none)."""
    label, size = names.LABEL_GANG, names.ANN_GANG_SIZE
    return (
        f"(has({obj}.metadata.labels) && '{label}' in {obj}.metadata.labels ? "
        f"{obj}.metadata.labels['{label}'] : '') + '/' + "
        f"(has({obj}.metadata.annotations) && '{size}' in {obj}.metadata.annotations ? "
        f"{obj}.metadata.annotations['{size}'] : '')"
    )


def _gang_fixed() -> dict[str, Any]:
    """A pod's gang is chosen at create (the webhook checks it against the other members) and
    never changes: a member leaving or resizing its gang would split what is admitted, placed
    and reclaimed together."""
    return {
        "expression": (
            f"request.operation != 'UPDATE' || {_gang_value('object')} == "
            f"{_gang_value('oldObject')}"
        ),
        "message": (
            f"label {names.LABEL_GANG} and annotation {names.ANN_GANG_SIZE} are set when the pod "
            f"is created and cannot change: a gang is admitted, placed and reclaimed as a whole; "
            f"create a new pod to change its gang"
        ),
        "reason": "Forbidden",
    }


def policy() -> dict[str, Any]:
    on_create = tuple(k for k in names.SYSTEM_ANNOTATIONS if k != names.ANN_QUEUED_AT)
    new_has = "variables.newAnnotated && k in object.metadata.annotations"
    old_has = "variables.oldAnnotated && k in oldObject.metadata.annotations"
    written = (
        f"(request.operation == 'CREATE' ? {_cel_list(on_create)} : "
        f"{_cel_list(names.SYSTEM_ANNOTATIONS)}).filter(k, "
        # the webhook stamps a claim pod's ask on create (overwriting any), whoever creates the
        # pod: a ReplicaSet's too
        f"!(k == '{names.ANN_CLAIM}' && request.operation == 'CREATE' && "
        f"has(object.spec.resourceClaims)) && "
        f"(({new_has}) != ({old_has}) || "
        f"(({new_has}) && ({old_has}) && "
        f"object.metadata.annotations[k] != oldObject.metadata.annotations[k])))"
    )
    label = names.LABEL_TENANT
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": NAME},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["pods"],
                    }
                ]
            },
            "matchConditions": [
                {
                    "name": "not-gpupool",
                    "expression": (
                        f"!(request.userInfo.username in {_cel_list(writer_users())}) && "
                        f"!(has(request.userInfo.groups) && "
                        f"'{ADMINS_GROUP}' in request.userInfo.groups)"
                    ),
                },
                {
                    "name": "carries-gpupool-marks",
                    "expression": (
                        f"{_marked('object')} || "
                        f"(request.operation == 'UPDATE' && ({_marked('oldObject')}))"
                    ),
                },
            ],
            "variables": [
                {"name": "newAnnotated", "expression": "has(object.metadata.annotations)"},
                {
                    "name": "oldAnnotated",
                    "expression": (
                        "request.operation == 'UPDATE' && has(oldObject.metadata.annotations)"
                    ),
                },
                {"name": "written", "expression": written},
            ],
            "validations": [
                {
                    "expression": "size(variables.written) == 0",
                    "messageExpression": (
                        "'annotations ' + variables.written.join(', ') + ' are written only by "
                        "gpupool (its controller and extender): they record where the pod queues, "
                        "its admission and its card; leave them out of the pods you create and "
                        "as they are on the pods you change'"
                    ),
                    "reason": "Forbidden",
                },
                {
                    "expression": (
                        f"request.operation != 'UPDATE' || !({_has_gate('oldObject')}) || "
                        f"({_has_gate('object')})"
                    ),
                    "message": (
                        f"the scheduling gate {names.QUOTA_GATE} is removed only by gpupool's "
                        f"controller, when the pod's tenant has quota for it; the pod's "
                        f"{names.ANN_QUEUE} annotation says where it waits"
                    ),
                    "reason": "Forbidden",
                },
                _renewal_by_tenant(),
                _gang_fixed(),
                {
                    "expression": (
                        f"request.operation != 'UPDATE' || "
                        f"!has(oldObject.metadata.labels) || "
                        f"!('{label}' in oldObject.metadata.labels) || "
                        f"(has(object.metadata.labels) && '{label}' in object.metadata.labels && "
                        f"object.metadata.labels['{label}'] == "
                        f"oldObject.metadata.labels['{label}'])"
                    ),
                    "message": (
                        f"label {label} is set from the namespace when the pod is created and "
                        f"cannot change"
                    ),
                    "reason": "Forbidden",
                },
            ],
        },
    }


def binding() -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": NAME},
        "spec": {"policyName": NAME, "validationActions": ["Deny"]},
    }


def objects() -> list[dict[str, Any]]:
    """The policy and its binding, in the order to apply them."""
    return [policy(), binding()]
