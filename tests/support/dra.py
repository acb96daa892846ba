"""ResourceClaims for the DRA driver's tests, shaped as the API server returns them
(resource.k8s.io/v1: spec.devices.requests, status.allocation.devices.results with
consumedCapacity, status.reservedFor)."""

from __future__ import annotations

from typing import Any

from gpupool.adapters.wire.names import DRA_DRIVER


def result(
    device: str,
    *,
    memory: str | None = None,
    compute: str | None = None,
    request: str = "gpu",
    pool: str = "n1",
    driver: str = DRA_DRIVER,
    share_id: str | None = "share-1",
) -> dict[str, Any]:
    consumed: dict[str, str] = {}
    if memory is not None:
        consumed["memory"] = memory
    if compute is not None:
        consumed["compute"] = compute
    out: dict[str, Any] = {"request": request, "driver": driver, "pool": pool, "device": device}
    if consumed:
        consumed["shares"] = "1"
        out["consumedCapacity"] = consumed
    if share_id is not None:
        out["shareID"] = share_id
    return out


def claim_json(
    name: str,
    *results: dict[str, Any],
    uid: str | None = None,
    namespace: str = "team",
    requests: list[dict[str, Any]] | None = None,
    config: list[dict[str, Any]] | None = None,
    pod: str | None = "trainer-0",
    allocated: bool = True,
) -> dict[str, Any]:
    """An allocated claim; `requests` defaults to one request `gpu` of class gpu.gpupool.io."""
    spec_requests = requests or [
        {"name": "gpu", "exactly": {"deviceClassName": DRA_DRIVER}},
    ]
    status: dict[str, Any] = {}
    if allocated:
        status["allocation"] = {"devices": {"results": list(results), "config": config or []}}
    if pod is not None:
        status["reservedFor"] = [{"resource": "pods", "name": pod, "uid": f"uid-{pod}"}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": namespace, "name": name, "uid": uid or f"uid-{name}"},
        "spec": {"devices": {"requests": spec_requests}},
        "status": status,
    }


def mps_config() -> list[dict[str, Any]]:
    return [
        {
            "source": "FromClaim",
            "opaque": {"driver": DRA_DRIVER, "parameters": {"computeMode": "mps"}},
        }
    ]
