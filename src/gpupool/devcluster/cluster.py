"""The dev cluster: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok on
loopback, and fake GPU nodes; with a `GpupoolSpec`, all of gpupool on top: the CRDs, the
scheduler extender (kube-scheduler configured to call it), the admission webhook (registered with
its CA), the controller and the fake node agents' GpuNode heartbeats (`heartbeat.py`), each a
`gpupool` process; with a `RealNodeSpec`, one real node beside them (`realnode/`: kubelet,
containerd, and gpupool's agent for its fake GPU), which `down` takes apart to the last mount.

gpupool's processes run under their own least-privilege identities, not as admin: `up` applies
deploy/rbac, deploy/policies and the CRDs as admin, registers the webhook as admin (with the CA
of the serving certificate it made for the webhook), and starts each component with a kubeconfig
for its ServiceAccount (`gpupool_layer.py`, `rbac.py`, `pki/identities/<component>.kubeconfig`).
What "ready" means for each part is `readiness.py`.

Everything lives in one state folder: `pki/` (with `identities/` and `users/`, the kubeconfigs
of components and of `user_kubeconfig`), `etcd/` (data), `logs/<component>.log`, `kubeconfig`
(admin), `scheduler.kubeconfig`, `webhook-certs/`, `scheduler.yaml` and `state.json` (ports, pids
and start times). `up` writes `state.json` after every process it starts, so `down` — from this
or any later gpupool process — stops exactly what was started, by pid, even after a failed `up`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gpupool.adapters.webhook.certs import ensure_serving_cert
from gpupool.devcluster import control_plane, gpupool_layer, processes, readiness
from gpupool.devcluster.apiclient import Connection, KubeApi
from gpupool.devcluster.binaries import Binaries
from gpupool.devcluster.certs import generate_pki, issue_client
from gpupool.devcluster.errors import (
    ClusterAlreadyRunning,
    ClusterNotRunning,
    UnknownComponent,
)
from gpupool.devcluster.kubeconfig import write_kubeconfig
from gpupool.devcluster.nodes import FakeNodeSpec, build_node
from gpupool.devcluster.patience import (
    PER_NODE_READ_S,
    PER_NODE_S,
    Allowance,
    ProgressWatch,
    Reading,
    poll_interval_s,
)
from gpupool.devcluster.ports import LOOPBACK, claim
from gpupool.devcluster.processes import ProcessRecord
from gpupool.devcluster.realnode import node as realnode
from gpupool.devcluster.realnode import teardown
from gpupool.devcluster.scheduler_config import ExtenderConfig, write_scheduler_configuration
from gpupool.devcluster.spec import (
    ClusterSpec,
    ClusterState,
    ComponentStatus,
)

# Start order; `down` stops in reverse.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
STATE_FILE = "state.json"


def default_state_dir() -> Path:
    """$GPUPOOL_DEV_CLUSTER_DIR, else ~/.cache/gpupool/dev-cluster."""
    override = os.environ.get("GPUPOOL_DEV_CLUSTER_DIR")
    if override:
        return Path(override)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "gpupool" / "dev-cluster"


def _env() -> dict[str, str]:
    """The components' environment: ours, with loopback exempt from any proxy."""
    env = dict(os.environ)
    for key in ("NO_PROXY", "no_proxy"):
        current = [h for h in env.get(key, "").split(",") if h]
        missing = [h for h in ("127.0.0.1", "localhost") if h not in current]
        env[key] = ",".join([*current, *missing])
    return env


# Node creates in flight at once: well inside the API server's limit of 200 mutating requests,
# and enough to keep it busy while each request's TLS handshake and JSON are done here.
CREATE_WORKERS = 8


def create_nodes(
    api: KubeApi, nodes: Sequence[FakeNodeSpec], workers: int = CREATE_WORKERS
) -> None:
    """Create the fake nodes, `workers` requests at a time, each worker on one kept-alive
    connection; the first error is raised."""
    local = threading.local()
    opened: list[Connection] = []
    lock = threading.Lock()

    def create(node: FakeNodeSpec) -> None:
        conn: Connection | None = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = api.connection()
            with lock:
                opened.append(conn)
        conn.create("/api/v1/nodes", build_node(node))

    try:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="create-node") as pool:
            futures = [pool.submit(create, node) for node in nodes]
            try:
                for future in futures:
                    future.result()
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
    finally:
        for conn in opened:
            conn.close()


def _file_stem(user: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", user).strip("._")
    return stem or "user"


class DevCluster:
    """One dev cluster, identified by its state folder."""

    def __init__(self, state_dir: Path | None = None, bin_dir: Path | None = None) -> None:
        self.state_dir = (state_dir or default_state_dir()).expanduser().resolve()
        self.bin_dir = bin_dir
        self.pki_dir = self.state_dir / "pki"
        self.etcd_dir = self.state_dir / "etcd"
        self.log_dir = self.state_dir / "logs"
        self.kubeconfig_path = self.state_dir / "kubeconfig"
        self.scheduler_kubeconfig_path = self.state_dir / "scheduler.kubeconfig"
        self.controller_manager_kubeconfig_path = self.state_dir / "controller-manager.kubeconfig"
        self.scheduler_config_path = self.state_dir / "scheduler.yaml"
        # Inside pki/: removed with it by every `up` (their CA is gone).
        self.identities_dir = self.pki_dir / "identities"
        self.users_dir = self.pki_dir / "users"
        self.webhook_cert_dir = self.state_dir / "webhook-certs"
        self.state_path = self.state_dir / STATE_FILE

    def component_kubeconfig(self, component: str) -> Path:
        """The kubeconfig `up` wrote for a gpupool process (its ServiceAccount's identity)."""
        return self.identities_dir / f"{component}.kubeconfig"

    def user_kubeconfig(self, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig for `user` in `groups` on the running cluster: a client certificate from
        the cluster's CA, so RBAC sees exactly that user and those groups (e.g. a tenant
        developer in `team-a-developers`, or a quota admin in `gpupool-quota-admins`)."""
        state = self.running_state()
        stem = _file_stem(user)
        pair = issue_client(self.pki_dir, f"user-{stem}", user, groups)
        return write_kubeconfig(
            self.users_dir / f"{stem}.kubeconfig",
            state.server,
            self.pki_dir / "ca.crt",
            pair.cert,
            pair.key,
            user,
        )

    # ---- state -------------------------------------------------------------------------------

    def load_state(self) -> ClusterState | None:
        try:
            data = json.loads(self.state_path.read_text())
        except FileNotFoundError:
            return None
        return ClusterState.from_json(data)

    def _save(self, state: ClusterState) -> None:
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state.to_json(), indent=2) + "\n")
        tmp.replace(self.state_path)

    def running_state(self) -> ClusterState:
        """The state of a cluster whose components all run; ClusterNotRunning otherwise."""
        state = self.load_state()
        if state is None or not state.processes:
            raise ClusterNotRunning(
                f"no dev cluster in {self.state_dir}; start one with `gpupool dev-cluster up`"
            )
        stopped = [p.name for p in state.processes if not processes.is_running(p)]
        if stopped:
            raise ClusterNotRunning(
                f"dev cluster in {self.state_dir} is broken: {', '.join(stopped)} not running "
                f"(logs in {self.log_dir}); run `gpupool dev-cluster down` and `up` again"
            )
        return state

    def is_running(self) -> bool:
        """Whether any process of this folder's cluster still runs."""
        state = self.load_state()
        return state is not None and any(processes.is_running(p) for p in state.processes)

    def restart(self, component: str) -> ProcessRecord:
        """Stop one component (if it still runs) and start it again with the same command and
        log; `state.json` then holds the new process, so `down` stops it."""
        state = self.load_state()
        if state is None or not state.processes:
            raise ClusterNotRunning(
                f"no dev cluster in {self.state_dir}; start one with `gpupool dev-cluster up`"
            )
        names = [p.name for p in state.processes]
        if component not in names:
            raise UnknownComponent(
                f"{component!r} is not a component of the dev cluster in {self.state_dir}; "
                f"its components: {', '.join(names)}"
            )
        index = names.index(component)
        old = state.processes[index]
        processes.stop(old)
        new = processes.start(old.name, old.argv, Path(old.log), env=_env(), cwd=self.state_dir)
        state.processes[index] = new
        self._save(state)
        return new

    def status(self) -> list[ComponentStatus]:
        state = self.load_state()
        if state is None:
            return []
        return [
            ComponentStatus(p.name, p.pid, processes.is_running(p), p.log) for p in state.processes
        ]

    def api(self) -> KubeApi:
        state = self.running_state()
        return self._api(state.server)

    def _api(self, server: str) -> KubeApi:
        return KubeApi(
            server, self.pki_dir / "ca.crt", self.pki_dir / "admin.crt", self.pki_dir / "admin.key"
        )

    # ---- up ----------------------------------------------------------------------------------

    def up(self, spec: ClusterSpec, *, die_with_parent: bool = False) -> ClusterState:
        """Start every component, create the fake nodes, wait until all are ready.

        On any failure (or Ctrl-C) stops what it started before raising. `die_with_parent`
        ties the components' lives to this process (for test sessions).
        """
        previous = self.load_state()
        if previous is not None and any(processes.is_running(p) for p in previous.processes):
            raise ClusterAlreadyRunning(
                f"a dev cluster already runs from {self.state_dir} (kubeconfig "
                f"{previous.kubeconfig}); stop it with `gpupool dev-cluster down` first"
            )
        binaries = Binaries.locate(self.bin_dir)
        real_node = None
        if spec.real_node is not None:
            tools = realnode.prepare(
                self.state_dir,
                lambda d: DevCluster(d).is_running(),
                lambda d: DevCluster(d).down(),
            )
            real_node = (tools, binaries.kubelet())
        for stale in (self.etcd_dir, self.pki_dir, self.log_dir):
            shutil.rmtree(stale, ignore_errors=True)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir()

        taken: set[int] = set()
        ports = {
            "etcd": claim("etcd", spec.ports.etcd, taken),
            "etcd-peer": claim("etcd", spec.ports.etcd_peer, taken),
            "kube-apiserver": claim("kube-apiserver", spec.ports.apiserver, taken),
            "kube-controller-manager": claim(
                "kube-controller-manager", spec.ports.controller_manager, taken
            ),
            "kube-scheduler": claim("kube-scheduler", spec.ports.scheduler, taken),
            "kwok": claim("kwok", spec.ports.kwok, taken),
        }
        gpupool = spec.gpupool
        extender = spec.extender
        if gpupool is not None:
            ports["gpupool-webhook"] = claim("gpupool-webhook", None, taken)
            ports["gpupool-controller-metrics"] = claim("gpupool-controller", None, taken)
            if gpupool.run_web:
                ports["gpupool-web"] = claim("gpupool-web", None, taken)
            ports["gpupool-webhook-metrics"] = claim("gpupool-webhook", None, taken)
            if gpupool.run_extender and extender is None:
                ports["gpupool-extender"] = claim("gpupool-extender", None, taken)
                # HTTPS with kube-scheduler's own client certificate: the extender takes filter,
                # prioritize and bind from its holder only (generate_pki writes these files).
                extender = ExtenderConfig(
                    url_prefix=f"https://{LOOPBACK}:{ports['gpupool-extender']}/gpupool",
                    ca_file=self.pki_dir / "ca.crt",
                    cert_file=self.pki_dir / "scheduler.crt",
                    key_file=self.pki_dir / "scheduler.key",
                )
        server = f"https://{LOOPBACK}:{ports['kube-apiserver']}"
        state = ClusterState(
            state_dir=str(self.state_dir),
            server=server,
            kubeconfig=str(self.kubeconfig_path),
            bin_dir=str(binaries.kubectl.parent),
            ports=ports,
            extender_url=extender.url_prefix if extender else None,
        )
        self._save(state)

        pki = generate_pki(self.pki_dir)
        write_kubeconfig(
            self.kubeconfig_path, server, pki.ca.cert, pki.admin.cert, pki.admin.key, "admin"
        )
        write_kubeconfig(
            self.scheduler_kubeconfig_path,
            server,
            pki.ca.cert,
            pki.scheduler.cert,
            pki.scheduler.key,
            "kube-scheduler",
        )
        write_kubeconfig(
            self.controller_manager_kubeconfig_path,
            server,
            pki.ca.cert,
            pki.controller_manager.cert,
            pki.controller_manager.key,
            "kube-controller-manager",
        )
        write_scheduler_configuration(
            self.scheduler_config_path, self.scheduler_kubeconfig_path, extender
        )
        env = _env()
        deadline_s = spec.ready_timeout_s

        def launch(name: str, argv: list[str]) -> ProcessRecord:
            record = processes.start(
                name,
                argv,
                self.log_dir / f"{name}.log",
                env=env,
                cwd=self.state_dir,
                die_with_parent=die_with_parent,
            )
            state.processes.append(record)
            self._save(state)
            return record

        try:
            etcd = launch("etcd", control_plane.etcd_argv(binaries, ports, self.etcd_dir))
            apiserver = launch(
                "kube-apiserver",
                control_plane.apiserver_argv(
                    binaries, ports, pki, self.state_dir / "apiserver-certs"
                ),
            )
            readiness.wait(
                etcd,
                deadline_s,
                lambda: readiness.http_ok(f"http://{LOOPBACK}:{ports['etcd']}/health"),
            )
            api = self._api(server)
            readiness.wait(apiserver, deadline_s, lambda: readiness.apiserver_ready(api))
            controller_manager = launch(
                "kube-controller-manager",
                control_plane.controller_manager_argv(
                    binaries,
                    ports,
                    pki,
                    self.controller_manager_kubeconfig_path,
                    self.state_dir / "controller-manager-certs",
                ),
            )
            if gpupool is not None:
                crds = gpupool_layer.create_crds(api)
                gpupool_layer.apply_rbac(api)
                gpupool_layer.apply_policies(api)
                gpupool_layer.write_identities(self.pki_dir, server, self.component_kubeconfig)
                ensure_serving_cert(self.webhook_cert_dir, gpupool_layer.WEBHOOK_CERT_HOSTS)
            scheduler = launch(
                "kube-scheduler",
                control_plane.scheduler_argv(
                    binaries, ports, self.scheduler_config_path, self.state_dir / "scheduler-certs"
                ),
            )
            kwok_config = self.state_dir / "kwok.yaml"
            kwok_config.write_text(control_plane.KWOK_CONFIG)
            kwok = launch(
                "kwok",
                control_plane.kwok_argv(binaries, ports, kwok_config, self.kubeconfig_path),
            )
            started: dict[str, ProcessRecord] = {}
            if gpupool is not None:
                readiness.wait(apiserver, deadline_s, lambda: readiness.crds_established(api, crds))
                argvs = control_plane.gpupool_argvs(
                    gpupool,
                    ports,
                    kubeconfig=self.component_kubeconfig,
                    pki_dir=self.pki_dir,
                    webhook_cert_dir=self.webhook_cert_dir,
                )
                for name, argv in argvs.items():
                    started[name] = launch(name, argv)
            create_nodes(api, spec.nodes)
            state.nodes.extend(node.name for node in spec.nodes)
            self._save(state)
            # Waits that grow with the cluster (patience.py): a count (nodes Ready, GpuNodes
            # beating) may take `--timeout` without progress and `--timeout` + PER_NODE_S per
            # node in all; a yes/no that reads the whole cluster, `--timeout` + PER_NODE_READ_S
            # per node.
            count = len(spec.nodes)
            per_node = Allowance(deadline_s, PER_NODE_S)
            read_all_s = Allowance(deadline_s, PER_NODE_READ_S).limit_s(count)
            insecure = readiness.insecure_context()
            scheduler_url = f"https://{LOOPBACK}:{ports['kube-scheduler']}/healthz"
            readiness.wait(
                scheduler, read_all_s, lambda: readiness.http_ok(scheduler_url, insecure)
            )
            manager_url = f"https://{LOOPBACK}:{ports['kube-controller-manager']}/healthz"
            readiness.wait(
                controller_manager, read_all_s, lambda: readiness.http_ok(manager_url, insecure)
            )
            # Pods need their namespace's default ServiceAccount (the ServiceAccount admission
            # plugin refuses them until the controller manager has made it).
            readiness.wait(controller_manager, read_all_s, lambda: readiness.default_account(api))
            readiness.wait_progress(
                kwok,
                ProgressWatch("nodes Ready", count, per_node, time.monotonic()),
                lambda: readiness.nodes_ready(api, state.nodes),
                interval_s=poll_interval_s(count),
            )
            # A GpuNode appears at the heartbeat's next round: allow a few rounds of silence.
            beat_s = gpupool.heartbeat_s if gpupool is not None else 0.0
            per_gpunode = Allowance(max(deadline_s, 3 * beat_s), PER_NODE_S)

            def wait_count(
                record: ProcessRecord, what: str, probe: Callable[[], Reading | None]
            ) -> None:
                watch = ProgressWatch(what, count, per_gpunode, time.monotonic())
                readiness.wait_progress(record, watch, probe, interval_s=poll_interval_s(count))

            gpupool_layer.wait_ready(
                api,
                started,
                ports,
                state.nodes,
                (self.pki_dir, self.webhook_cert_dir),
                readiness.wait,
                read_all_s,
                wait_count,
            )
            if spec.real_node is not None and real_node is not None:
                state.real_node = spec.real_node.name
                state.host_before = realnode.record_host()
                self._save(state)
                real = realnode.RealNode(
                    self.state_dir, self.pki_dir, server, *real_node, spec.real_node
                )
                real.start(
                    api,
                    launch,
                    lambda record, ready: readiness.wait(record, deadline_s, ready),
                    with_agent=gpupool is not None,
                )
        except BaseException:
            self._stop_all(state)
            raise
        return state

    # ---- down --------------------------------------------------------------------------------

    def down(self) -> list[str]:
        """Stop every recorded process (newest first); return the names of those that ran."""
        state = self.load_state()
        if state is None:
            return []
        stopped = self._stop_all(state)
        with contextlib.suppress(FileNotFoundError):
            self.state_path.unlink()
        return stopped

    def _stop_all(self, state: ClusterState) -> list[str]:
        stopped: list[str] = []
        if state.host_before is not None:
            # Containers, shims, mounts, links, iptables, cgroups and sysctls of the real node.
            node = [r for r in state.processes if r.name in teardown.NODE_PROCESSES]
            stopped += [r.name for r in reversed(node) if processes.is_running(r)]
            teardown.teardown(self.state_dir, state.host_before, node, processes.stop)
        for record in reversed(state.processes):
            if processes.is_running(record):
                stopped.append(record.name)
            processes.stop(record)
        return stopped

    def logs(self) -> Iterator[Path]:
        """The component log files of the current or last cluster."""
        if self.log_dir.is_dir():
            yield from sorted(self.log_dir.glob("*.log"))
