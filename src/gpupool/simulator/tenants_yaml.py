"""Tenants for a replay, from YAML.

```yaml
resource: gpu            # gpu (milli-GPU, the default) or gpu-memory (bytes)
fifo: best-effort        # or strict
tenants:
  - name: ls
    qos: [LS]            # trace pods of these QoS classes; leave out on one tenant: "the rest"
    pod_priority: 1      # priority of this tenant's pods (reclaim takes the lowest first)
    nominal: 40%         # of the cluster; or 2500m / 12 (GPUs) for gpu; 120Gi for gpu-memory
    guaranteed: 20%
    cohort: pool         # optional; tenants borrow only inside their cohort
    borrow_limit: 10%    # optional; absent: no limit
    lend_limit: 30%      # optional; absent: all unused nominal quota
    priority: 1          # tenant priority: its queue is served first
    max_pods: 500        # optional
    compute_limit: 4000m # optional, milli-GPU
    reclaim_grace_s: 30
    lend_after_idle_s: 1800  # optional; unused quota is lent only once idle this long (0: at once)
    budget: {limit: 5000, window_s: 86400, on_exhaustion: block}   # GPU- or GiB-hours
```
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpupool.domain.errors import GpupoolError, InputFileError, InvalidQuota
from gpupool.domain.requests import MILLI
from gpupool.domain.units import parse_bytes
from gpupool.quota.queue import FifoMode
from gpupool.quota.resource import Resource
from gpupool.quota.spec import Budget, OnExhaustion, TenantQuota
from gpupool.simulator.tenancy import Tenancy, TenantRule

_KEYS = {
    "name",
    "qos",
    "pod_priority",
    "nominal",
    "guaranteed",
    "cohort",
    "borrow_limit",
    "lend_limit",
    "priority",
    "max_pods",
    "compute_limit",
    "reclaim_grace_s",
    "budget",
    "lend_after_idle_s",
}


def parse_amount(value: object, resource: Resource, capacity: int, what: str) -> int:
    """`40%` of capacity; for gpu `2500m` or a number of GPUs; for gpu-memory a byte quantity."""
    text = str(value).strip()
    if isinstance(value, bool):
        raise InvalidQuota(f"{what}: expected a quantity, got {value!r}")
    if text.endswith("%"):
        try:
            pct = float(text[:-1])
        except ValueError:
            raise InvalidQuota(f"{what}: {text!r} is not a percentage such as 40%") from None
        if pct < 0:
            raise InvalidQuota(f"{what}: must be 0% or more; got {text}")
        return int(capacity * pct / 100)
    if resource is Resource.GPU:
        try:
            if text.endswith("m"):
                return int(text[:-1])
            return round(float(text) * MILLI)
        except ValueError:
            raise InvalidQuota(
                f"{what}: {text!r} is not a GPU quantity such as 2500m, 2.5 or 40%"
            ) from None
    if text == "0":
        return 0
    return parse_bytes(text, what=what)


def _optional(
    raw: dict[str, Any], key: str, resource: Resource, capacity: int, who: str
) -> int | None:
    if raw.get(key) is None:
        return None
    return parse_amount(raw[key], resource, capacity, f"{who}: {key}")


def _seconds(raw: dict[str, Any], key: str, who: str) -> float:
    value = raw.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidQuota(f"{who}: {key} must be a number of seconds; got {value!r}")
    return float(value)


def _tenant(raw: object, resource: Resource, capacity: int, index: int) -> TenantRule:
    if not isinstance(raw, dict):
        raise InvalidQuota(f"tenant #{index + 1}: expected a mapping with name, nominal, ...")
    unknown = sorted(set(raw) - _KEYS)
    who = f"tenant {raw.get('name', f'#{index + 1}')!r}"
    if unknown:
        raise InvalidQuota(f"{who}: unknown key(s) {', '.join(unknown)}; known: {sorted(_KEYS)}")
    if "nominal" not in raw:
        raise InvalidQuota(f"{who}: needs a nominal quota (e.g. nominal: 40%)")
    budget = None
    if raw.get("budget") is not None:
        b = raw["budget"]
        if not isinstance(b, dict) or "limit" not in b or "window_s" not in b:
            raise InvalidQuota(f"{who}: budget needs limit and window_s")
        budget = Budget(
            limit=float(b["limit"]),
            window_s=float(b["window_s"]),
            on_exhaustion=OnExhaustion.parse(str(b.get("on_exhaustion", "block"))),
        )
    qos = raw.get("qos")
    if qos is not None and (not isinstance(qos, list) or not all(isinstance(q, str) for q in qos)):
        raise InvalidQuota(f"{who}: qos must be a list such as [LS, BE]")
    compute = raw.get("compute_limit")
    quota = TenantQuota(
        name=str(raw.get("name", "")),
        nominal=parse_amount(raw["nominal"], resource, capacity, f"{who}: nominal"),
        guaranteed=_optional(raw, "guaranteed", resource, capacity, who) or 0,
        resource=resource,
        borrow_limit=_optional(raw, "borrow_limit", resource, capacity, who),
        lend_limit=_optional(raw, "lend_limit", resource, capacity, who),
        compute_limit_milli=None
        if compute is None
        else parse_amount(compute, Resource.GPU, MILLI, f"{who}: compute_limit"),
        max_pods=None if raw.get("max_pods") is None else int(raw["max_pods"]),
        budget=budget,
        priority=int(raw.get("priority", 0)),
        cohort=None if raw.get("cohort") is None else str(raw["cohort"]),
        reclaim_grace_s=float(raw.get("reclaim_grace_s", 30.0)),
        lend_after_idle_s=_seconds(raw, "lend_after_idle_s", who),
    )
    return TenantRule(
        quota=quota,
        qos=None if qos is None else tuple(qos),
        pod_priority=int(raw.get("pod_priority", 0)),
    )


def load_tenancy(path: str | Path, capacity: dict[Resource, int]) -> Tenancy:
    """Read a tenants file; every problem names the file (and the tenant)."""
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputFileError(where, 0, None, f"cannot read file: {exc.strerror}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 0
        raise InputFileError(where, line, None, f"not valid YAML: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("tenants"), list):
        raise InputFileError(where, 1, None, "expected a mapping with a `tenants:` list")
    try:
        resource = Resource.parse(str(data.get("resource", "gpu")))
        fifo = FifoMode(str(data.get("fifo", "best-effort")))
    except (GpupoolError, ValueError) as exc:
        raise InputFileError(where, 1, None, f"{exc}; fifo is strict or best-effort") from exc
    total = capacity.get(resource)
    if total is None:
        raise InputFileError(
            where, 1, "resource", f"the cluster's {resource.value} capacity is unknown; use gpu"
        )
    try:
        rules = tuple(_tenant(raw, resource, total, i) for i, raw in enumerate(data["tenants"]))
        return Tenancy(rules=rules, resource=resource, fifo=fifo)
    except (GpupoolError, ValueError, TypeError) as exc:
        raise InputFileError(where, 0, None, str(exc)) from exc
