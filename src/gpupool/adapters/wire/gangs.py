"""A pod's gang marks, read from its JSON: label `gpupool.io/gang` (the gang's name) and
annotation `gpupool.io/gang-size` (how many pods it has). One parser for the webhook, the
controller and the extender; `InvalidGang` says what to write instead."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gpupool.adapters.wire import names
from gpupool.domain.errors import InvalidGang
from gpupool.domain.gang import MAX_GANG_SIZE, GangMark

# A label value (what the API server would accept anyway), with our own message
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def _size(text: str) -> int:
    problem = (
        f"annotation {names.ANN_GANG_SIZE} must be a whole number of pods from 1 to "
        f"{MAX_GANG_SIZE}; got {text!r}"
    )
    value = text.strip()
    if not re.fullmatch(r"[+-]?\d+", value):
        raise InvalidGang(problem)
    size = int(value)
    if size < 1:
        raise InvalidGang(f"{problem}: a gang has at least one pod")
    if size > MAX_GANG_SIZE:
        raise InvalidGang(
            f"{problem}: gpupool admits gangs of at most {MAX_GANG_SIZE} pods; split the job "
            f"into smaller gangs"
        )
    return size


def read_gang(meta: Mapping[str, Any], namespace: str | None = None) -> GangMark | None:
    """The pod's gang (None: it is in none); `namespace` when `meta` may lack it (a create)."""
    labels: Mapping[str, Any] = meta.get("labels") or {}
    annotations: Mapping[str, Any] = meta.get("annotations") or {}
    name = labels.get(names.LABEL_GANG)
    size = annotations.get(names.ANN_GANG_SIZE)
    if name is None and size is None:
        return None
    if name is None:
        raise InvalidGang(
            f"annotation {names.ANN_GANG_SIZE} needs the label {names.LABEL_GANG} naming the "
            f"gang; add the label (the same on every member), or remove the annotation"
        )
    if size is None:
        raise InvalidGang(
            f"label {names.LABEL_GANG}: {name!r} needs the annotation {names.ANN_GANG_SIZE}: the "
            f"number of pods in the gang, the same on every member"
        )
    text = str(name)
    if "/" in text:
        raise InvalidGang(
            f"label {names.LABEL_GANG} names the gang within the pod's namespace, and a gang "
            f"never spans namespaces or tenants (it is admitted against one tenant's quota); "
            f"got {text!r}: put every member in one namespace and name the gang without '/'"
        )
    if not _NAME.match(text):
        raise InvalidGang(
            f"label {names.LABEL_GANG} must be a label value (up to 63 letters, digits, '-', "
            f"'_' or '.', starting and ending with a letter or digit); got {text!r}"
        )
    ns = str(meta.get("namespace") or namespace or "")
    return GangMark(ns, text, _size(str(size)))
