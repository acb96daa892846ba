"""Leader election end to end: two `gpupool extender --leader-elect --advertise-url ...`
processes on one real kube-apiserver, so that two replicas never both bind.

Exactly one holds the coordination Lease and writes its URL there; a /bind sent to the other is
forwarded to it and binds the pod (the standby counts the forward and writes nothing itself); a
bind already forwarded once is refused by the standby, not sent on. SIGKILL the leader: the
standby's forwards fail with an error naming the dead leader's URL, it takes over once the dead
leader's lease has run out (not before), then binds itself; stopped, it gives the lease (and its
URL) up. Binds are driven over HTTP with the extender/v1 JSON kube-scheduler sends, for pods no
scheduler picks up (their schedulerName names none), so nothing but these calls can bind them.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import urllib.error
import urllib.request
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
from gpupool.devcluster.ports import free_port

if TYPE_CHECKING:
    from conftest import E2ECluster

pytestmark = pytest.mark.e2e

GPUPOOL = str(Path(sys.executable).parent / "gpupool")
GPULEASES = "/apis/gpupool.io/v1alpha1"
LEASE_NAME = "gpupool-extender"
LEADER_URL = "gpupool.io/leader-url"
FORWARDED = "X-Gpupool-Forwarded"
# Short, so the takeover shows within seconds; the renew deadline keeps 2 s under the lease.
# Only the processes use them: the test reads every time it compares off the Lease.
LEASE_S, DEADLINE_S, RETRY_S = 6, 4.0, 0.5


@dataclass(frozen=True)
class Replica:
    identity: str
    port: int
    record: processes.ProcessRecord

    @property
    def advertised(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return f"{self.advertised}{path}"

    def log(self) -> str:
        return processes.tail(self.record.log, 60)


def _http(
    url: str, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None
) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    req.add_header("Content-Type", "application/json")
    for key, value in (headers or {}).items():
        req.add_header(key, value)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError as err:
        return 0, str(err)


def _start(cluster: E2ECluster, identity: str, leader_ns: str, log_dir: Path) -> Replica:
    port = free_port()
    argv = [
        GPUPOOL, "extender",
        "--kubeconfig", str(cluster.kubeconfig), "--port", str(port), "--apply-crds",
        "--leader-elect", "--leader-namespace", leader_ns, "--leader-name", LEASE_NAME,
        "--identity", identity, "--advertise-url", f"http://127.0.0.1:{port}",
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
    replica = Replica(identity, port, record)

    def ready() -> bool:
        assert processes.is_running(record), f"{identity} exited:\n{replica.log()}"
        return _http(replica.url("/healthz"))[0] == 200

    ok = poll_until(ready, timeout_s=60, interval_s=0.2)
    assert ok, f"{identity} not ready:\n{replica.log()}"
    return replica


def _lease(api: KubeApi, ns: str) -> dict[str, Any] | None:
    lease: dict[str, Any] | None = api.find(lease_path(ns, LEASE_NAME))
    return lease


def _holder(api: KubeApi, ns: str) -> str | None:
    return holder(api, ns, LEASE_NAME)


def _leader_url(api: KubeApi, ns: str) -> str | None:
    annotations = ((_lease(api, ns) or {}).get("metadata") or {}).get("annotations") or {}
    url: str | None = annotations.get(LEADER_URL)
    return url


def _metric(replica: Replica, sample: str) -> float | None:
    """One sample's value on the replica's /metrics (0 when absent), None if it does not answer."""
    status, text = _http(replica.url("/metrics"))
    if status != 200:
        return None
    for line in text.splitlines():
        if line.startswith(f"{sample} "):
            return float(line.split()[1])
    return 0.0


def _says_leader(replica: Replica) -> bool | None:
    """The replica's own word (gpupool_extender_leader on /metrics), None if it does not answer."""
    value = _metric(replica, "gpupool_extender_leader")
    return None if value is None else value == 1.0


def _forwards(replica: Replica, outcome: str) -> float | None:
    return _metric(replica, f'gpupool_extender_bind_forwards_total{{outcome="{outcome}"}}')


def _gpuleases(api: KubeApi, ns: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = api.get(f"{GPULEASES}/namespaces/{ns}/gpuleases")["items"]
    return items


def _unscheduled_pod(api: KubeApi, ns: str, name: str) -> dict[str, Any]:
    """A slice no scheduler picks up (its schedulerName names none): only our /bind binds it."""
    body = pod_json(name, gpu_memory="10Gi", vgpu=1, scheduler_name="no-such-scheduler")
    pod: dict[str, Any] = api.create(f"/api/v1/namespaces/{ns}/pods", body)
    return pod


def _gpu_node(api: KubeApi) -> str:
    for node in api.get("/api/v1/nodes")["items"]:
        if "gpupool.io/gpu-model" in (node["metadata"].get("labels") or {}):
            name: str = node["metadata"]["name"]
            return name
    raise AssertionError("the dev cluster has no GPU node")


def _bind(replica: Replica, body: dict[str, Any], headers: dict[str, str] | None = None) -> str:
    """The extender's Error for the bind ("" when it bound); fails on anything but a 200."""
    status, text = _http(replica.url("/gpupool/bind"), body, headers)  # the urlPrefix path
    assert status == 200, f"/bind on {replica.identity}: HTTP {status}: {text}"
    error: str = json.loads(text)["Error"]
    return error


def _bound_by_lease(api: KubeApi, ns: str, pod: dict[str, Any], node: str) -> None:
    """The pod's GpuLease on the node, and the pod bound there carrying it."""
    name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]

    def leases() -> list[dict[str, Any]]:
        return [g for g in _gpuleases(api, ns) if g["metadata"]["name"] == uid]

    # the extender creates the lease after the Binding, in the background: wait for it
    poll_until(lambda: bool(leases()), timeout_s=30)
    [gpulease] = leases()
    assert gpulease["spec"]["node"] == node
    assert gpulease["spec"]["podRef"] == {"namespace": ns, "name": name, "uid": uid}
    bound = api.get(f"/api/v1/namespaces/{ns}/pods/{name}")
    assert bound["spec"].get("nodeName") == node
    assert bound["metadata"]["annotations"]["gpupool.io/lease"] == f"{ns}/{uid}"


def _untouched(api: KubeApi, ns: str, pod: dict[str, Any]) -> None:
    """No GpuLease for the pod, and the pod bound nowhere."""
    name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
    assert [g for g in _gpuleases(api, ns) if g["metadata"]["name"] == uid] == []
    assert not api.get(f"/api/v1/namespaces/{ns}/pods/{name}")["spec"].get("nodeName")


def _bind_body(pod: dict[str, Any], node: str) -> dict[str, Any]:
    meta = pod["metadata"]
    return {
        "PodName": meta["name"],
        "PodNamespace": meta["namespace"],
        "PodUID": meta["uid"],
        "Node": node,
    }


def test_one_replica_binds_and_the_other_takes_over_when_it_dies(
    dev_cluster: E2ECluster, namespace: str, tmp_path: Path
) -> None:
    api = dev_cluster.api
    ns = namespace  # the leader Lease, the pod and its GpuLease all live in the test's namespace
    replicas = {
        r.identity: r
        for r in (
            _start(dev_cluster, "replica-a", ns, tmp_path),
            _start(dev_cluster, "replica-b", ns, tmp_path),
        )
    }
    logs = lambda: "\n".join(f"--- {r.identity}\n{r.log()}" for r in replicas.values())  # noqa: E731
    try:
        # Exactly one holds the Lease, and only that one says it leads.
        elected = wait_until(lambda: _holder(api, ns), 30, lambda: f"a lease holder\n{logs()}")
        assert elected in replicas, f"lease holder {elected!r}:\n{logs()}"
        leader = replicas[elected]
        [follower] = [r for r in replicas.values() if r is not leader]
        wait_until(lambda: _says_leader(leader), 10, lambda: f"the leader to say so\n{logs()}")

        # For longer than a lease (renewed past the term it held, by the Lease's own times): the
        # leader renews, the follower never takes over nor says it leads.
        def follows() -> None:
            assert _says_leader(follower) is False, logs()

        renewed_past_one_term(api, ns, LEASE_NAME, leader.identity, follows, logs)
        # Both serve: /healthz speaks of the cache, not of the lease.
        assert _http(follower.url("/healthz"))[0] == 200
        # The leader's URL is on the Lease beside its name.
        assert _leader_url(api, ns) == leader.advertised, _lease(api, ns)

        # A bind already forwarded once is not sent on: the follower refuses it, writes nothing.
        node = _gpu_node(api)
        marked = _unscheduled_pod(api, ns, "marked")
        error = _bind(follower, _bind_body(marked, node), {FORWARDED: "1"})
        assert "not the leader" in error, error
        _untouched(api, ns, marked)
        assert _forwards(follower, "ok") == 0

        # A bind sent to the follower is forwarded to the leader, which binds the pod.
        forwarded = _unscheduled_pod(api, ns, "forwarded")
        assert _bind(follower, _bind_body(forwarded, node)) == "", logs()
        _bound_by_lease(api, ns, forwarded, node)
        assert _forwards(follower, "ok") == 1, logs()
        assert _forwards(leader, "ok") == 0  # the leader bound it itself
        assert _metric(leader, 'gpupool_extender_binds_total{outcome="ok"}') == 1, logs()
        assert _metric(follower, 'gpupool_extender_binds_total{outcome="ok"}') == 0, logs()
        _untouched(api, ns, marked)

        # SIGKILL the leader: no release, the follower must wait its lease out.
        os.kill(leader.record.pid, signal.SIGKILL)
        wait_until(lambda: not processes.is_running(leader.record), 10, "the leader to die")
        dead = read_term(api, ns, LEASE_NAME)  # its last renewal: nobody writes until a takeover
        assert dead is not None and dead.holder == leader.identity, f"{dead}\n{logs()}"
        # While that term runs the follower still forwards to the dead leader: an Error naming
        # it, and the Lease, read after the reply, still the dead leader's.
        pod = _unscheduled_pod(api, ns, "p")
        body = _bind_body(pod, node)
        error = _bind(follower, body)
        assert f"leader at {leader.advertised} failed" in error, error
        assert read_term(api, ns, LEASE_NAME) == dead, (
            "the window was missed: a takeover came first"
        )
        assert _forwards(follower, "error") == 1, logs()
        _untouched(api, ns, pod)
        # It takes over, and not before that term has run out by the Lease's own times.
        took_over = wait_for_takeover(
            api, ns, LEASE_NAME, dead, follower.identity, lambda: f"a takeover\n{logs()}"
        )
        assert took_over.transitions == dead.transitions + 1, took_over
        wait_until(lambda: _says_leader(follower), 10, lambda: f"the follower to say so\n{logs()}")

        assert _leader_url(api, ns) == follower.advertised, _lease(api, ns)

        # The survivor, now leader, binds itself: the pod's GpuLease on the node, the pod bound.
        assert _bind(follower, body) == "", logs()
        _bound_by_lease(api, ns, pod, node)
        assert _forwards(follower, "ok") == 1 and _forwards(follower, "error") == 1, logs()
        assert _metric(follower, 'gpupool_extender_binds_total{outcome="ok"}') == 1, logs()
        assert len(_gpuleases(api, ns)) == 2  # forwarded's and p's: none for the refused ones

        # Stopped (SIGTERM), the leader gives the lease up rather than let it run out.
        processes.stop(follower.record)
        assert not processes.is_running(follower.record)
        assert _holder(api, ns) is None, f"{_lease(api, ns)}\n{logs()}"
        assert _leader_url(api, ns) is None, _lease(api, ns)
    finally:
        for replica in replicas.values():
            processes.stop(replica.record)
