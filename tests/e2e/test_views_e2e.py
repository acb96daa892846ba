"""`gpupool status|queue|leases` against all of gpupool on the dev cluster, run as the command a
person runs (a subprocess with a kubeconfig): a tenant's admitted pods appear on the cards their
GpuLeases name, a pod over quota appears in the queue at its position, as the admin and as the
tenant (who may read only its namespace's leases and its own GpuQuota); bad input exits 2."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest

from gpupool.devcluster import rbac
from gpupool.devcluster.polling import poll_until

if TYPE_CHECKING:
    from conftest import E2ECluster

pytestmark = pytest.mark.e2e

API = "/apis/gpupool.io/v1alpha1"


def _gpupool(kubeconfig: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpupool.cli.main", *args, "--kubeconfig", kubeconfig],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _json(kubeconfig: str, *args: str) -> Any:
    out = _gpupool(kubeconfig, *args, "-o", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/infer:1",
                    "resources": {"limits": {"gpupool.io/gpu-memory": "12Gi"}},
                }
            ]
        },
    }


def _user_kubeconfig(c: E2ECluster, user: str, group: str) -> str:
    args = [sys.executable, "-m", "gpupool.cli.main", "dev-cluster", "kubeconfig"]
    args += ["--dir", str(c.cluster.state_dir), "--user", user, "--group", group]
    out = subprocess.run(args, check=True, capture_output=True, text=True, timeout=60)
    return out.stdout.strip()


def test_admitted_pods_show_on_their_cards_and_a_queued_pod_at_its_position(
    gpupool_cluster: E2ECluster,
) -> None:
    c = gpupool_cluster
    admin = c.api
    tenant = f"views-{secrets.token_hex(3)}"
    admin.create(
        f"{API}/gpuquotas",
        {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": "GpuQuota",
            "metadata": {"name": tenant},
            "spec": {"nominal": "24Gi"},
        },
    )
    ns = tenant
    admin.create(
        "/api/v1/namespaces",
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": ns, "labels": {"gpupool.io/tenant": tenant}},
        },
    )
    rbac.apply(admin, rbac.tenant_rbac(ns, tenant))
    pods = f"/api/v1/namespaces/{ns}/pods"
    for name in ("infer-1", "infer-2"):
        admin.create(pods, _pod(name))

    def leases() -> dict[str, dict[str, Any]] | None:
        found = {}
        for name in ("infer-1", "infer-2"):
            pod = admin.get(f"{pods}/{name}")
            ref = (pod["metadata"].get("annotations") or {}).get("gpupool.io/lease")
            if not ref:
                return None
            # the lease is written just after the Binding: not found yet means not yet
            lease = admin.find(f"{API}/namespaces/{ns}/gpuleases/{ref.split('/')[1]}")
            if lease is None:
                return None
            found[name] = lease
        return found

    placed = poll_until(leases, timeout_s=90)
    assert placed, "the tenant's pods got no GpuLeases"
    admin.create(pods, _pod("over-quota"))  # 24Gi of 24Gi are held: it waits at the gate

    def recorded() -> list[Any] | None:
        queue = (admin.get(f"{API}/gpuquotas/{tenant}").get("status") or {}).get("queue") or []
        return queue or None

    assert poll_until(recorded, timeout_s=60), "the controller never recorded the queue"

    # As the admin: every slice on the card its lease names; the queued pod at position 1.
    kubeconfig = str(c.kubeconfig)
    status = _json(kubeconfig, "status")
    for name, lease in placed.items():
        node = next(n for n in status["nodes"] if n["name"] == lease["spec"]["node"])
        card_index = lease["spec"]["devices"][0]["index"]
        card = next(card for card in node["cards"] if card["index"] == card_index)
        assert f"{ns}/{name}" in [s["pod"] for s in card["slices"]]
        assert card["freeBytes"] + card["usedBytes"] == card["memoryBytes"]
    mine = next(t for t in status["tenants"] if t["name"] == tenant)
    assert (mine["used"], mine["liveLeases"]) == (24 * 1024**3, 2)
    queue = _json(kubeconfig, "queue", "--tenant", tenant)["items"]
    assert [(q["pod"], q["position"], q["stage"]) for q in queue] == [
        (f"{ns}/over-quota", 1, "quota")
    ]
    text = _gpupool(kubeconfig, "status", "--node", placed["infer-1"]["spec"]["node"])
    assert text.returncode == 0 and f"{ns}/infer-1" in text.stdout

    # As the tenant: no pool map (it may not list nodes), but its leases and its queue.
    dev = _user_kubeconfig(c, "bob", f"{tenant}-developers")
    own = _json(dev, "leases", "-n", ns)
    assert sorted(x["pod"] for x in own["live"]) == [f"{ns}/infer-1", f"{ns}/infer-2"]
    assert any("pool map is hidden" in n for n in own["notes"])
    queue = _json(dev, "queue", "-n", ns)["items"]
    assert [(q["pod"], q["position"]) for q in queue] == [(f"{ns}/over-quota", 1)]
    text = _gpupool(dev, "status", "-n", ns, "--tenant", tenant)
    assert text.returncode == 0, text.stderr
    assert "used 24Gi of nominal 24Gi" in text.stdout
    # Another namespace is refused by RBAC: a note, nothing of it shown.
    other = _json(dev, "leases", "-n", "default")
    assert other["live"] == [] and any(
        "may not list gpuleases in default" in n for n in other["notes"]
    )

    # Bad input: an unknown node or tenant says so and exits 2.
    bad = _gpupool(kubeconfig, "status", "--node", "no-such-node")
    assert bad.returncode == 2 and "no GPU node named 'no-such-node'" in bad.stderr
    bad = _gpupool(dev, "status", "-n", ns, "--tenant", "someone-else")
    assert bad.returncode == 2 and "no tenant named 'someone-else'" in bad.stderr
    assert "Traceback" not in bad.stderr
