"""The controller's leader election end to end: two `gpupool controller --leader-elect` processes
on one real kube-apiserver, so that two replicas never both reconcile.

Exactly one holds the coordination Lease (and only its log says it reconciles); a gated pod
within its tenant's quota is admitted (the gpupool.io/quota gate removed) by that leader, as the
Admitted event's reportingInstance says. SIGKILL the leader: no release, so the pod created next
stays gated until the survivor has waited the dead leader's lease out; then the survivor holds
the Lease and admits it. Stopped with SIGTERM, the survivor gives the Lease up. Pods are created
gated and labelled as the webhook would (no webhook runs here) and no scheduler picks them up
(their schedulerName names none), so nothing but the controllers touches them.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from support.builders import pod_json
from support.coordination import (
    holder,
    lease_path,
    read_term,
    renewed_past_one_term,
    wait_for_takeover,
)
from support.waiting import wait_until

from gpupool.devcluster import processes
from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.polling import poll_until

if TYPE_CHECKING:
    from conftest import E2ECluster

pytestmark = pytest.mark.e2e

GPUPOOL = str(Path(sys.executable).parent / "gpupool")
REPO = Path(__file__).resolve().parents[2]
QUOTAS = "/apis/gpupool.io/v1alpha1/gpuquotas"
LEASE_NAME = "gpupool-controller"
GATE = "gpupool.io/quota"
# Short, so the takeover shows within seconds; the renew deadline keeps 2 s under the lease.
# Only the processes use them: the test reads every time it compares off the Lease.
LEASE_S, DEADLINE_S, RETRY_S = 6, 4.0, 0.5
RECONCILING = "leader: reconciling"  # what the manager logs when it starts reconciling


@dataclass(frozen=True)
class Replica:
    identity: str
    record: processes.ProcessRecord

    def log(self) -> str:
        return Path(self.record.log).read_text(errors="replace")


def _start(cluster: E2ECluster, identity: str, leader_ns: str, log_dir: Path) -> Replica:
    argv = [
        GPUPOOL, "controller",
        "--kubeconfig", str(cluster.kubeconfig), "--resync", "1",
        "--leader-elect", "--leader-namespace", leader_ns, "--leader-name", LEASE_NAME,
        "--identity", identity,
        "--leader-lease-seconds", str(LEASE_S),
        "--leader-renew-deadline-seconds", str(DEADLINE_S),
        "--leader-retry-seconds", str(RETRY_S),
    ]  # fmt: skip
    record = processes.start(
        identity,
        argv,
        log_dir / f"{identity}.log",
        env={**os.environ, "NO_PROXY": "127.0.0.1,localhost"},
        die_with_parent=True,
    )
    return Replica(identity, record)


def _lease(api: KubeApi, ns: str) -> dict[str, Any] | None:
    lease: dict[str, Any] | None = api.find(lease_path(ns, LEASE_NAME))
    return lease


def _holder(api: KubeApi, ns: str) -> str | None:
    return holder(api, ns, LEASE_NAME)


def _gated_pod(api: KubeApi, ns: str, name: str, tenant: str) -> None:
    """A pod as the webhook leaves it: tenant label, the quota gate, 12Gi of GPU memory."""
    body = pod_json(
        name,
        labels={"gpupool.io/tenant": tenant},
        gpu_memory="12Gi",
        vgpu=1,
        requests_too=True,
        scheduler_name="no-such-scheduler",
        gates=[GATE],
    )
    api.create(f"/api/v1/namespaces/{ns}/pods", body)


def _gates(api: KubeApi, ns: str, name: str) -> list[str]:
    pod = api.get(f"/api/v1/namespaces/{ns}/pods/{name}")
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


def _admitted_by(api: KubeApi, ns: str, name: str) -> list[str]:
    """The reportingInstance of every Admitted event on the pod (the replica that admitted it)."""
    events = api.get(f"/api/v1/namespaces/{ns}/events")["items"]
    return [
        str(e.get("reportingInstance"))
        for e in events
        if e["reason"] == "Admitted" and e["involvedObject"]["name"] == name
    ]


def _established(api: KubeApi, path: str) -> bool:
    conditions = (api.get(path).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def test_one_controller_reconciles_and_the_other_takes_over_when_it_dies(
    dev_cluster: E2ECluster, namespace: str, tmp_path: Path
) -> None:
    api = dev_cluster.api
    ns = namespace  # the leader Lease and the pods live in the test's namespace
    subprocess.run(
        [
            str(dev_cluster.binaries.kubectl), "--kubeconfig", str(dev_cluster.kubeconfig),
            "apply", "-f", str(REPO / "deploy" / "crds"),
        ],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    for crd in ("gpuquotas", "gpuleases", "gpunodes"):
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}.gpupool.io"
        assert poll_until(lambda path=path: _established(api, path), timeout_s=30), path
    tenant = f"team-{secrets.token_hex(3)}"
    api.create(
        QUOTAS,
        {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": "GpuQuota",
            "metadata": {"name": tenant},
            "spec": {"nominal": "48Gi"},  # room for both pods: each is admitted on its own
        },
    )
    replicas = {
        r.identity: r
        for r in (
            _start(dev_cluster, "controller-a", ns, tmp_path),
            _start(dev_cluster, "controller-b", ns, tmp_path),
        )
    }

    def logs() -> str:
        return "\n".join(
            f"--- {r.identity}\n{processes.tail(r.record.log, 60)}" for r in replicas.values()
        )

    try:
        # Exactly one holds the Lease; for longer than a lease it renews and nobody takes over.
        elected = wait_until(lambda: _holder(api, ns), 30, lambda: f"a lease holder\n{logs()}")
        assert elected in replicas, f"lease holder {elected!r}:\n{logs()}"
        leader = replicas[elected]
        [standby] = [r for r in replicas.values() if r is not leader]

        def both_run() -> None:
            assert all(processes.is_running(r.record) for r in replicas.values()), logs()

        renewed_past_one_term(api, ns, LEASE_NAME, leader.identity, both_run, logs)
        assert RECONCILING in leader.log(), logs()
        assert RECONCILING not in standby.log(), logs()

        # A gated pod within quota: the leader admits it.
        _gated_pod(api, ns, "first", tenant)
        admitted = poll_until(
            lambda: _gates(api, ns, "first") == [] or None, timeout_s=30, interval_s=0.2
        )
        assert admitted, f"{api.get(f'/api/v1/namespaces/{ns}/pods/first')}\n{logs()}"
        pod = api.get(f"/api/v1/namespaces/{ns}/pods/first")
        assert "gpupool.io/admitted" in pod["metadata"]["annotations"], pod
        assert poll_until(lambda: _admitted_by(api, ns, "first"), timeout_s=10), logs()
        assert set(_admitted_by(api, ns, "first")) == {leader.identity}, logs()

        # SIGKILL the leader: no release, the standby must wait the lease out.
        os.kill(leader.record.pid, signal.SIGKILL)
        wait_until(lambda: not processes.is_running(leader.record), 10, "the leader to die")
        dead = read_term(api, ns, LEASE_NAME)  # its last renewal: nobody writes until a takeover
        assert dead is not None and dead.holder == leader.identity, f"{dead}\n{logs()}"
        _gated_pod(api, ns, "second", tenant)

        # Nobody admits it while the dead leader's term runs (by the Lease's own times); then
        # the standby takes the Lease over.
        def still_gated() -> Callable[[], None]:
            gates = _gates(api, ns, "second")

            def check() -> None:
                assert gates == [GATE], f"admitted while {dead} ran\n{logs()}"

            return check

        took_over = wait_for_takeover(
            api,
            ns,
            LEASE_NAME,
            dead,
            standby.identity,
            lambda: f"a takeover\n{logs()}",
            observe=still_gated,
        )
        assert took_over.transitions == dead.transitions + 1, took_over

        # The survivor, now leader, admits the next gated pod.
        admitted = poll_until(
            lambda: _gates(api, ns, "second") == [] or None, timeout_s=30, interval_s=0.2
        )
        assert admitted, f"{api.get(f'/api/v1/namespaces/{ns}/pods/second')}\n{logs()}"
        assert poll_until(lambda: _admitted_by(api, ns, "second"), timeout_s=10), logs()
        assert set(_admitted_by(api, ns, "second")) == {standby.identity}, logs()
        assert RECONCILING in standby.log(), logs()

        # Stopped (SIGTERM), the leader gives the Lease up rather than let it run out.
        processes.stop(standby.record)
        assert not processes.is_running(standby.record)
        assert _holder(api, ns) is None, f"{_lease(api, ns)}\n{logs()}"
    finally:
        for replica in replicas.values():
            processes.stop(replica.record)
