"""The command lines of the control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok) and of gpupool's own processes: pure, from the binaries, the ports `up`
claimed, the PKI and the paths under the state folder. `cluster.DevCluster.up` launches them."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path

from gpupool.devcluster.binaries import Binaries
from gpupool.devcluster.certs import SERVICE_CLUSTER_IP_RANGE, Pki
from gpupool.devcluster.ports import LOOPBACK
from gpupool.devcluster.spec import GpupoolSpec

POD_CIDR = "10.244.0.1/16"
NODE_MONITOR_GRACE = "30m"  # kube-controller-manager's wait before a silent node is Unknown
KWOK_SELECTOR = "type=kwok"  # the label of the nodes kwok keeps alive (nodes.LABEL_TYPE)
CONTROLLER_MANAGER_QPS = 200
# DRA for a later driver: resource.k8s.io/v1 is served by default since 1.34 (it is in
# stableAPIGroupVersionsEnabledByDefault, pkg/controlplane/instance.go, and the
# DynamicResourceAllocation gate is GA and locked on in 1.35+). Consumable capacity (several
# claims sharing one device, KEP-5075) is the DRAConsumableCapacity gate: alpha in 1.34 and 1.35,
# beta and on by default in 1.36 (pkg/features/kube_features.go of k8s.io/kubernetes v1.36.3;
# verified 2026-12-03). The apiserver (which otherwise drops the fields) and kube-scheduler (its
# allocator) read it; it is named here so the dev cluster keeps it whatever the default.
DRA_FEATURE_GATES = "--feature-gates=DRAConsumableCapacity=true"


def etcd_argv(binaries: Binaries, ports: Mapping[str, int], data_dir: Path) -> list[str]:
    client = f"http://{LOOPBACK}:{ports['etcd']}"
    peer = f"http://{LOOPBACK}:{ports['etcd-peer']}"
    return [
        str(binaries.etcd),
        "--name=gpupool-dev",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=gpupool-dev={peer}",
        "--initial-cluster-state=new",
        "--unsafe-no-fsync=true",
        "--quota-backend-bytes=8589934592",
        "--log-level=warn",
    ]


def apiserver_argv(
    binaries: Binaries, ports: Mapping[str, int], pki: Pki, cert_dir: Path
) -> list[str]:
    return [
        str(binaries.kube_apiserver),
        f"--etcd-servers=http://{LOOPBACK}:{ports['etcd']}",
        f"--bind-address={LOOPBACK}",
        f"--advertise-address={LOOPBACK}",
        f"--secure-port={ports['kube-apiserver']}",
        f"--cert-dir={cert_dir}",
        f"--tls-cert-file={pki.apiserver.cert}",
        f"--tls-private-key-file={pki.apiserver.key}",
        f"--client-ca-file={pki.ca.cert}",
        f"--service-account-key-file={pki.service_account_pub}",
        f"--service-account-signing-key-file={pki.service_account_key}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        # The Node authorizer and NodeRestriction keep a kubelet (`up --real-node`) to its
        # own Node and the pods bound to it.
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        # The kubelets' serving certificates come from the cluster's CA; the apiserver
        # proves itself to them (logs, exec) with its own client certificate.
        f"--kubelet-certificate-authority={pki.ca.cert}",
        f"--kubelet-client-certificate={pki.kubelet_client.cert}",
        f"--kubelet-client-key={pki.kubelet_client.key}",
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        # One apiserver on loopback: no endpoint reconciling for the kubernetes Service.
        "--endpoint-reconciler-type=none",
        # No kube-proxy routes Service addresses: the apiserver dials a webhook Service's
        # endpoints (the chart's webhook pod on the real node's host network) directly.
        "--enable-aggregator-routing=true",
        "--allow-privileged=true",
        "--enable-priority-and-fairness=false",
        "--profiling=false",
        # ConfigMaps are watched from etcd, not the apiserver's watch cache: a test can then
        # compact etcd and see a watch's version gone (410), as a long-lived cluster does.
        # gpupool watches no ConfigMap.
        "--watch-cache-sizes=configmaps#0",
        DRA_FEATURE_GATES,
    ]


def controller_manager_argv(
    binaries: Binaries, ports: Mapping[str, int], pki: Pki, kubeconfig: Path, cert_dir: Path
) -> list[str]:
    """kube-controller-manager: Deployments, ReplicaSets, DaemonSets, garbage collection,
    namespaces, ServiceAccounts and their tokens, node lifecycle (which lifts the not-ready
    taint TaintNodesByCondition puts on new nodes), CSR signing with the cluster's CA."""
    return [
        str(binaries.kube_controller_manager),
        f"--kubeconfig={kubeconfig}",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={ports['kube-controller-manager']}",
        f"--cert-dir={cert_dir}",
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
        "--leader-elect=false",
        # Each controller under its own ServiceAccount, as in a real cluster.
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={pki.service_account_key}",
        f"--root-ca-file={pki.ca.cert}",
        f"--cluster-signing-cert-file={pki.ca.cert}",
        f"--cluster-signing-key-file={pki.ca.cert.with_suffix('.key')}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        # Its clients' own rate limit (default 20 requests/s, 30 burst, per controller) is what
        # held a 1,213-node cluster back: the node lifecycle controller lifts each new node's
        # not-ready taint with a GET and a PATCH, so 1,213 nodes took minutes. The API server
        # is on the same machine and has room for more.
        f"--kube-api-qps={CONTROLLER_MANAGER_QPS}",
        f"--kube-api-burst={2 * CONTROLLER_MANAGER_QPS}",
        # kwok refreshes its nodes' status every 10-20 minutes (the node-heartbeat-with-lease
        # stage) and renews no node Lease, so at the default 50 s every kwok node went Unknown
        # and Ready again several times a minute: changes no real idle cluster makes (kubelets
        # renew their Leases), which woke gpupool's loops and views. Longer than kwok's slowest
        # refresh; the real node's kubelet renews its Lease as usual.
        f"--node-monitor-grace-period={NODE_MONITOR_GRACE}",
    ]


def scheduler_argv(
    binaries: Binaries, ports: Mapping[str, int], config: Path, cert_dir: Path
) -> list[str]:
    return [
        str(binaries.kube_scheduler),
        f"--config={config}",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={ports['kube-scheduler']}",
        f"--cert-dir={cert_dir}",
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
        DRA_FEATURE_GATES,
    ]


def kwok_argv(
    binaries: Binaries, ports: Mapping[str, int], config: Path, kubeconfig: Path
) -> list[str]:
    return [
        str(binaries.kwok),
        f"--config={config}",
        f"--kubeconfig={kubeconfig}",
        # Only the fake nodes: a real node (`up --real-node`) has its own kubelet.
        f"--manage-nodes-with-label-selector={KWOK_SELECTOR}",
        f"--node-ip={LOOPBACK}",
        f"--cidr={POD_CIDR}",
        f"--server-address={LOOPBACK}:{ports['kwok']}",
    ]


# An explicit configuration, so kwok never reads the user's ~/.kwok/kwok.yaml. kwok v0.8 neither
# defaults the options of a configuration file (it failed at start: "playStageParallelism must be
# greater than 0") nor applies default stages ("No node stages found": nodes never Ready), so both
# are spelled out as v0.7 defaulted them: its option defaults (zz_generated.defaults.go; the CIDR
# and the node selection come as flags), and its stages (kwok_stages.yaml).
KWOK_OPTIONS = {
    "enableDebuggingHandlers": True,
    "enableContentionProfiling": False,
    "enableProfilingHandler": True,
    "podPlayStageParallelism": 4,
    "nodePlayStageParallelism": 4,
    "nodeLeaseParallelism": 4,
    "podsOnNodeSyncParallelism": 1,
    "enablePodsOnNodeSyncListPager": True,
    "enablePodsOnNodeSyncStreamWatch": False,
}
KWOK_CONFIG = (
    json.dumps(
        {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokConfiguration",
            "options": KWOK_OPTIONS,
        }
    )
    + "\n"
    + resources.files("gpupool.devcluster").joinpath("kwok_stages.yaml").read_text(encoding="utf-8")
)


def gpupool_argvs(
    spec: GpupoolSpec,
    ports: Mapping[str, int],
    *,
    kubeconfig: Callable[[str], Path],
    pki_dir: Path,
    webhook_cert_dir: Path,
) -> dict[str, list[str]]:
    """The `gpupool` processes, in start order (`down` stops them first, newest first)."""
    gpupool = [sys.executable, "-m", "gpupool.cli.main"]

    def identity(component: str) -> list[str]:
        return ["--kubeconfig", str(kubeconfig(component))]

    argvs: dict[str, list[str]] = {}
    if "gpupool-extender" in ports:
        argvs["gpupool-extender"] = [
            *gpupool, "extender", *identity("gpupool-extender"),
            "--host", LOOPBACK, "--port", str(ports["gpupool-extender"]),
            "--policy", spec.policy, "--log-level", spec.log_level,
            "--tls-cert", str(pki_dir / "extender.crt"),
            "--tls-key", str(pki_dir / "extender.key"),
            "--client-ca", str(pki_dir / "ca.crt"),
        ]  # fmt: skip
    argvs["gpupool-webhook"] = [
        *gpupool, "webhook", "serve", *identity("gpupool-webhook"),
        "--host", LOOPBACK, "--port", str(ports["gpupool-webhook"]),
        "--cert-dir", str(webhook_cert_dir),
        "--metrics-address", f"{LOOPBACK}:{ports['gpupool-webhook-metrics']}",
        "--log-level", spec.log_level,
    ]  # fmt: skip
    controller = [
        *gpupool, "controller", *identity("gpupool-controller"),
        "--resync", f"{spec.controller_resync_s:g}", "--log-level", spec.log_level,
        "--metrics-address", f"{LOOPBACK}:{ports['gpupool-controller-metrics']}",
    ]  # fmt: skip
    if spec.suspect_after_s is not None:
        controller += ["--suspect-after", f"{spec.suspect_after_s:g}"]
    if spec.lost_after_s is not None:
        controller += ["--lost-after", f"{spec.lost_after_s:g}"]
    argvs["gpupool-controller"] = controller
    if "gpupool-web" in ports:
        # --dev-insecure: a page without a token is the operator's (a token still narrows it).
        argvs["gpupool-web"] = [
            *gpupool, "web", *identity("gpupool-web"),
            "--host", LOOPBACK, "--port", str(ports["gpupool-web"]), "--dev-insecure",
            "--log-level", spec.log_level,
        ]  # fmt: skip
    argvs["gpupool-heartbeat"] = [
        *gpupool, "dev-cluster", "heartbeat", *identity("gpupool-heartbeat"),
        "--interval", f"{spec.heartbeat_s:g}", "--log-level", spec.log_level,
    ]  # fmt: skip
    return argvs
