"""The admission webhook and the controller's admission queue, end to end: real kube-apiserver
calling `gpupool webhook serve` over TLS, `gpupool controller` removing the quota gate.

Both run as processes, as a user starts them. The webhook registers itself for namespaces that
carry this module's label only, so other tests' pods never meet it, and removes its
configurations when it stops.
"""

from __future__ import annotations

import json
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from support.builders import pod_json
from support.priority_class import priority_class

from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.errors import ApiError
from gpupool.devcluster.polling import poll_until
from gpupool.devcluster.ports import free_port

if TYPE_CHECKING:
    from conftest import E2ECluster

pytestmark = pytest.mark.e2e

GPUPOOL = str(Path(sys.executable).parent / "gpupool")
REPO = Path(__file__).resolve().parents[2]
GATE = "gpupool.io/quota"
QUOTAS = "/apis/gpupool.io/v1alpha1/gpuquotas"


@dataclass(frozen=True)
class Components:
    api: KubeApi
    selector: tuple[str, str]  # the namespace label the webhook is registered for
    logs: Path


def _established(api: KubeApi, path: str) -> bool:
    conditions = (api.get(path).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def components(
    dev_cluster: E2ECluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Components]:
    api = dev_cluster.api
    subprocess.run(
        [
            str(dev_cluster.binaries.kubectl),
            "--kubeconfig",
            str(dev_cluster.kubeconfig),
            "apply",
            "-f",
            str(REPO / "deploy" / "crds"),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    for crd in ("gpuquotas", "gpuleases"):
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}.gpupool.io"
        assert poll_until(lambda path=path: _established(api, path), timeout_s=30), path

    token = secrets.token_hex(3)
    selector = ("gpupool.io/e2e-webhook", token)
    name = f"gpupool-e2e-{token}"
    folder = tmp_path_factory.mktemp("webhook-controller")
    port = free_port()
    kubeconfig = str(dev_cluster.kubeconfig)
    webhook_log = (folder / "webhook.log").open("wb")
    controller_log = (folder / "controller.log").open("wb")
    webhook = subprocess.Popen(
        [
            GPUPOOL, "webhook", "serve",
            "--host", "127.0.0.1", "--port", str(port),
            "--cert-dir", str(folder / "certs"),
            "--kubeconfig", kubeconfig,
            "--register-url", f"https://127.0.0.1:{port}",
            "--namespace-label", f"{selector[0]}={selector[1]}",
            "--name", name,
            "--unregister-on-exit",
        ],
        stdout=webhook_log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    controller = subprocess.Popen(
        [GPUPOOL, "controller", "--kubeconfig", kubeconfig, "--resync", "2"],
        stdout=controller_log,
        stderr=subprocess.STDOUT,
    )
    try:
        registered = poll_until(
            lambda: (
                webhook.poll() is None
                and api.exists(
                    f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{name}"
                )
            ),
            timeout_s=30,
        )
        assert registered, (folder / "webhook.log").read_text()
        yield Components(api, selector, folder)
    finally:
        _stop(controller)
        _stop(webhook)
        webhook_log.close()
        controller_log.close()
    assert not api.exists(
        f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{name}"
    ), "the webhook left its configuration behind"


def _namespace(c: Components, tenant: str | None) -> str:
    name = f"wh-{secrets.token_hex(4)}"
    labels = {c.selector[0]: c.selector[1]}
    if tenant is not None:
        labels["gpupool.io/tenant"] = tenant
    c.api.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}},
    )
    return name


def _pod(
    name: str,
    limits: dict[str, str],
    annotations: dict[str, str] | None = None,
    priority_class: str | None = None,
) -> dict[str, Any]:
    return pod_json(
        name,
        limits={"cpu": "1", **limits},
        annotations=annotations or {},
        priority_class=priority_class or None,
    )


def _rejection(c: Components, namespace: str, pod: dict[str, Any]) -> str:
    with pytest.raises(ApiError) as caught:
        c.api.create(f"/api/v1/namespaces/{namespace}/pods", pod)
    assert caught.value.status in (400, 422), caught.value
    return str(caught.value)


def test_bad_gpu_requests_are_rejected_with_their_message(components: Components) -> None:
    ns = _namespace(components, "bad-input")
    negative = _rejection(components, ns, _pod("neg", {"gpupool.io/gpu-memory": "-3"}))
    assert 'gpupool.io/gpu-memory must be a positive quantity such as 12Gi; got "-3"' in negative
    zero = _rejection(components, ns, _pod("zero", {"gpupool.io/gpu-memory": "0"}))
    assert 'gpupool.io/gpu-memory must be a positive quantity such as 12Gi; got "0"' in zero
    model = _rejection(
        components,
        ns,
        _pod("model", {"gpupool.io/gpu-memory": "12Gi"}, {"gpupool.io/gpu-model": "B999"}),
    )
    assert "unknown GPU model 'B999'; known models: A100-40GB" in model
    too_big = _rejection(components, ns, _pod("big", {"gpupool.io/gpu-memory": "200Gi"}))
    assert "asks for 200Gi per GPU but the largest GPU gpupool knows has" in too_big
    compute = _rejection(
        components,
        ns,
        _pod("cmp", {"gpupool.io/gpu-memory": "1Gi", "gpupool.io/gpu-compute": "150"}),
    )
    assert "gpupool.io/gpu-compute must be a whole number from 1 to 100" in compute
    assert components.api.get(f"/api/v1/namespaces/{ns}/pods")["items"] == []


def test_quota_with_guaranteed_above_nominal_is_rejected(components: Components) -> None:
    tenant = f"t-{secrets.token_hex(3)}"
    with pytest.raises(ApiError) as caught:
        components.api.create(
            QUOTAS,
            {
                "apiVersion": "gpupool.io/v1alpha1",
                "kind": "GpuQuota",
                "metadata": {"name": tenant},
                "spec": {"nominal": "40Gi", "guaranteed": "80Gi"},
            },
        )
    assert "guaranteed quota is above the nominal quota" in str(caught.value)
    # what only the webhook can judge: a cohort whose tenants count different resources
    cohort = f"c-{secrets.token_hex(3)}"
    components.api.create(
        QUOTAS,
        {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": "GpuQuota",
            "metadata": {"name": tenant},
            "spec": {"nominal": "40Gi", "cohort": cohort},
        },
    )
    with pytest.raises(ApiError) as mixed:
        components.api.create(
            QUOTAS,
            {
                "apiVersion": "gpupool.io/v1alpha1",
                "kind": "GpuQuota",
                "metadata": {"name": f"{tenant}-gpus"},
                "spec": {"nominal": "4", "resource": "gpu", "cohort": cohort},
            },
        )
    assert f"cohort '{cohort}' mixes quota resources" in str(mixed.value)


def test_good_pod_is_mutated(components: Components) -> None:
    ns = _namespace(components, None)  # no tenant label: tenant `default`, unlimited
    created = components.api.create(
        f"/api/v1/namespaces/{ns}/pods",
        _pod(
            "good",
            {"gpupool.io/gpu-memory": "12Gi", "gpupool.io/gpu-compute": "30"},
            {"gpupool.io/gpu-model": "a100-80gb|h800"},
        ),
    )
    container = created["spec"]["containers"][0]["resources"]
    for part in ("limits", "requests"):
        assert container[part]["gpupool.io/vgpu"] == "1"
        assert container[part]["gpupool.io/gpu"] == "1"
        assert container[part]["gpupool.io/gpu-memory"] == "12Gi"
        assert container[part]["gpupool.io/gpu-compute"] == "30"
    assert {"name": GATE} in created["spec"]["schedulingGates"]
    assert created["metadata"]["labels"]["gpupool.io/tenant"] == "default"
    assert created["metadata"]["annotations"]["gpupool.io/gpu-model"] == "A100-80GB|H800"
    assert created["metadata"]["annotations"]["gpupool.io/queued-at"].endswith("Z")
    # the default tenant has no quota: the controller admits the pod at once
    admitted = poll_until(
        lambda: _gates(components.api, ns, "good") == [] or None, timeout_s=30, interval_s=0.2
    )
    assert admitted is not None, components.api.get(f"/api/v1/namespaces/{ns}/pods/good")
    pod = components.api.get(f"/api/v1/namespaces/{ns}/pods/good")
    assert json.loads(pod["metadata"]["annotations"]["gpupool.io/admitted"])["borrowed"] == 0
    # a pod without GPUs passes untouched
    plain = components.api.create(f"/api/v1/namespaces/{ns}/pods", _pod("plain", {}))
    assert "gpupool.io/tenant" not in (plain["metadata"].get("labels") or {})
    assert not plain["spec"].get("schedulingGates")


def _gates(api: KubeApi, ns: str, name: str) -> list[str]:
    pod = api.get(f"/api/v1/namespaces/{ns}/pods/{name}")
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


def _queue_note(api: KubeApi, ns: str, name: str) -> str:
    pod = api.get(f"/api/v1/namespaces/{ns}/pods/{name}")
    return str((pod["metadata"].get("annotations") or {}).get("gpupool.io/queue", ""))


def test_over_quota_pods_wait_gated_and_are_admitted_in_priority_then_fifo_order(
    components: Components,
) -> None:
    api = components.api
    tenant = f"team-{secrets.token_hex(3)}"
    api.create(
        QUOTAS,
        {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": "GpuQuota",
            "metadata": {"name": tenant},
            "spec": {"nominal": "24Gi"},
        },
    )
    urgent = priority_class(api, f"urgent-{tenant}", 1000, preempts=True)
    ns = _namespace(components, tenant)
    pods = f"/api/v1/namespaces/{ns}/pods"
    twelve = {"gpupool.io/gpu-memory": "12Gi"}
    for name in ("run-1", "run-2"):
        api.create(pods, _pod(name, twelve))
    assert poll_until(
        lambda: all(_gates(api, ns, n) == [] for n in ("run-1", "run-2")), timeout_s=30
    ), "the first two pods fit the quota and must be admitted"
    # over quota now: FIFO for equal priority, but the urgent pod, submitted last, goes first
    for name, cls in (("wait-a", None), ("wait-b", None), ("wait-urgent", urgent)):
        api.create(pods, _pod(name, twelve, priority_class=cls))

    expected = {"wait-urgent": 1, "wait-a": 2, "wait-b": 3}

    def positions_shown() -> bool:
        return all(
            _queue_note(api, ns, n).startswith(f"position {p} of 3 ") for n, p in expected.items()
        )

    assert poll_until(positions_shown, timeout_s=30, interval_s=0.2), {
        n: _queue_note(api, ns, n) for n in expected
    }
    for name in expected:
        assert _gates(api, ns, name) == [GATE]
    assert "24Gi of its 24Gi nominal quota" in _queue_note(api, ns, "wait-a")

    def quota_status() -> dict[str, Any] | None:
        status: dict[str, Any] = api.get(f"{QUOTAS}/{tenant}").get("status") or {}
        return status if status.get("queued") == 3 else None

    status = poll_until(quota_status, timeout_s=30, interval_s=0.2)
    assert status is not None, api.get(f"{QUOTAS}/{tenant}")
    assert status["used"] == "24Gi" and status["pods"] == 2
    assert [q["name"] for q in status["queue"]] == ["wait-urgent", "wait-a", "wait-b"]

    def queued_event() -> list[dict[str, Any]] | None:  # the event follows the status write
        items: list[dict[str, Any]] = api.get(f"/api/v1/namespaces/{ns}/events")["items"]
        mine = [e for e in items if e["involvedObject"]["name"] == "wait-b"]
        return items if any(e["reason"] == "Queued" for e in mine) else None

    events = api.get(f"/api/v1/namespaces/{ns}/events")["items"]
    assert poll_until(queued_event, timeout_s=30, interval_s=0.2), [
        (e["reason"], e["involvedObject"]["name"]) for e in events
    ]

    # capacity frees: the highest priority goes first, then the earliest submitted
    api.delete(f"{pods}/run-1")
    assert poll_until(lambda: _gates(api, ns, "wait-urgent") == [], timeout_s=30)
    assert poll_until(
        lambda: _queue_note(api, ns, "wait-a").startswith("position 1 of 2 "), timeout_s=30
    ), _queue_note(api, ns, "wait-a")
    assert _gates(api, ns, "wait-a") == [GATE] and _gates(api, ns, "wait-b") == [GATE]

    api.delete(f"{pods}/run-2")
    assert poll_until(lambda: _gates(api, ns, "wait-a") == [], timeout_s=30)
    assert poll_until(
        lambda: _queue_note(api, ns, "wait-b").startswith("position 1 of 1 "), timeout_s=30
    ), _queue_note(api, ns, "wait-b")
    assert _gates(api, ns, "wait-b") == [GATE]


def test_lease_is_released_and_metered_when_its_pod_is_gone(components: Components) -> None:
    """The controller releases a GpuLease (as the extender's bind writes it) once its pod is
    deleted, with the GiB-hours it held."""
    api = components.api
    ns = _namespace(components, None)
    created = api.create(
        f"/api/v1/namespaces/{ns}/pods", _pod("leased", {"gpupool.io/gpu-memory": "12Gi"})
    )
    uid = created["metadata"]["uid"]
    leases = f"/apis/gpupool.io/v1alpha1/namespaces/{ns}/gpuleases"
    api.create(
        leases,
        {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": "GpuLease",
            "metadata": {"name": uid},
            "spec": {
                "tenant": "default",
                "podRef": {"namespace": ns, "name": "leased", "uid": uid},
                "node": "gpu-node-0",
                "devices": [{"uuid": "GPU-gpu-node-0-0", "index": 0, "model": "A100-80GB",
                             "offsetBytes": 0, "sizeBytes": 12 * 2**30}],
                "amount": 12 * 2**30,
            },
        },
    )  # fmt: skip
    assert poll_until(lambda: _gates(api, ns, "leased") == [], timeout_s=30)
    api.delete(f"/api/v1/namespaces/{ns}/pods/leased")

    def released() -> dict[str, Any] | None:
        status: dict[str, Any] = api.get(f"{leases}/{uid}").get("status") or {}
        return status if status.get("phase") == "Released" else None

    status = poll_until(released, timeout_s=30, interval_s=0.2)
    assert status is not None, api.get(f"{leases}/{uid}")
    assert status["conditions"][0]["reason"] == "PodGone"
    assert status["gibHours"] >= 0 and status["end"].endswith("Z")
