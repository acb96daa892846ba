"""What real node agents' look for other GPU paths asks of the API server; print JSON.

    .venv/bin/python bench/agent_paths_requests.py [--nodes 4] [--settle 30] [--window 120]
        [--label before] [--out bench/results/NAME.json]

Brings up a small dev cluster with all of gpupool and an audit log of LIST/WATCH requests
(bench/api_requests.py), pauses the fake heartbeat on every fake node and runs a real
`gpupool agent --fake-gpus` for each (as the ServiceAccount gpupool-agent, the chart's RBAC), waits
`--settle` seconds, then counts over `--window` seconds, per minute: LIST and WATCH requests by
resource (the API server's /metrics), and from the audit log by client and resource, split into
requests scoped to one node (a fieldSelector: the real agents) and cluster-wide ones (the fake
heartbeat, the controller, the extender, ...); also what was asked from the agents' start to the
window, and what each GpuNode's OtherGpuPath condition says at the end (the agents did look).
The cluster and the agents are torn down at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from api_requests import RequestWindow, install_audit
from emit import emit

from gpupool.adapters.wire.names import ANN_FAKE_HEARTBEAT
from gpupool.devcluster import ClusterSpec, DevCluster
from gpupool.devcluster.binaries import Binaries, version_tag
from gpupool.devcluster.nodes import node_specs, parse_gpu_spec
from gpupool.devcluster.ports import free_port
from gpupool.devcluster.spec import GpupoolSpec

GPUNODES = "/apis/gpupool.io/v1alpha1/gpunodes"
_SERVICE_ACCOUNT = "system:serviceaccount:gpupool-system:"


def requests_by_client(audit_log: Path, start: int, end: int) -> Counter[tuple[str, str, str]]:
    """LIST/WATCH requests by (client and scope, verb, resource) in the audit log's bytes."""
    out: Counter[tuple[str, str, str]] = Counter()
    with audit_log.open("rb") as f:
        f.seek(start)
        for line in f.read(end - start).splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            verb = str(event.get("verb"))
            if verb not in ("list", "watch"):
                continue
            user = str((event.get("user") or {}).get("username", "?"))
            user = user.removeprefix(_SERVICE_ACCOUNT)
            scoped = "fieldSelector=" in str(event.get("requestURI", ""))
            who = f"{user} ({'one node' if scoped else 'cluster-wide'})"
            resource = str((event.get("objectRef") or {}).get("resource", "?"))
            out[(who, verb, resource)] += 1
    return out


def _said(gpunode: dict[str, Any]) -> str | None:
    """The reason of the GpuNode's OtherGpuPath condition (the agent looked), else None."""
    for cond in (gpunode.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "OtherGpuPath":
            return str(cond.get("reason"))
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--gpus", default="8xA100-80GB")
    parser.add_argument("--settle", type=float, default=30.0, metavar="SECONDS")
    parser.add_argument("--window", type=float, default=120.0, metavar="SECONDS")
    parser.add_argument("--agent-args", default="", help="more arguments for each agent")
    parser.add_argument("--label", default="")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    def say(text: str) -> None:
        print(f"[bench] {text}", file=sys.stderr, flush=True)

    Binaries.locate()
    spec = ClusterSpec(nodes=tuple(node_specs(args.nodes, parse_gpu_spec(args.gpus))),
                       gpupool=GpupoolSpec())  # fmt: skip
    agents: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="gpupool-bench-") as tmp:
        audit_log = install_audit(Path(tmp))
        cluster = DevCluster(Path(tmp) / "cluster")
        say(f"up with {args.nodes} nodes")
        state = cluster.up(spec, die_with_parent=True)
        try:
            api = cluster.api()
            kubeconfig = cluster.component_kubeconfig("gpupool-heartbeat")  # SA gpupool-agent
            for node in sorted(state.nodes):
                paused = {"metadata": {"annotations": {ANN_FAKE_HEARTBEAT: "paused"}}}
                api.patch(f"{GPUNODES}/{node}", paused)
                work = Path(tmp) / node
                work.mkdir()
                argv = [sys.executable, "-m", "gpupool.cli.main", "agent", "--node-name", node,
                        "--fake-gpus", args.gpus, "--kubeconfig", str(kubeconfig),
                        "--device-plugin-dir", str(work / "plugins"),
                        "--limits-dir", str(work / "lim"), "--usage-dir", str(work / "usage"),
                        "--metrics-address", f"127.0.0.1:{free_port()}",
                        *args.agent_args.split()]  # fmt: skip
                log = (work / "agent.log").open("wb")
                agents.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))
            started = audit_log.stat().st_size
            say(f"{len(agents)} agents started; settling {args.settle:g}s")
            time.sleep(args.settle)
            offset = audit_log.stat().st_size
            at_start = requests_by_client(audit_log, started, offset)
            window = RequestWindow(api, None)
            say(f"counting for {args.window:g}s")
            time.sleep(args.window)
            counted = window.finish()
            clients = requests_by_client(audit_log, offset, audit_log.stat().st_size)
            per_min = 60.0 / float(counted["window_s"])
            alive = sum(1 for a in agents if a.poll() is None)
            said = {n: _said(api.get(f"{GPUNODES}/{n}")) for n in sorted(state.nodes)}
        finally:
            for proc in agents:
                proc.terminate()
            for proc in agents:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
            cluster.down()
    table: dict[str, dict[str, float]] = {}
    for (who, verb, resource), value in sorted(clients.items()):
        table.setdefault(who, {})[f"{verb.upper()} {resource}"] = round(value * per_min, 1)
    result: dict[str, Any] = {
        "benchmark": "agents' look for other GPU paths: API requests on an idle dev cluster",
        "label": args.label,
        "binaries": version_tag(),
        "nodes": args.nodes,
        "real_agents": len(agents),
        "agents_alive_at_end": alive,
        "agent_args": args.agent_args,
        "settle_s": args.settle,
        "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
        "agents_said": said,
        "requests": counted,
        "per_minute_by_client": table,
        "note": "a WATCH is counted when it is opened; a watch kept open through the window "
        "is not counted again",
        "from_agent_start_to_window_by_client": {
            f"{who}: {verb.upper()} {resource}": n for (who, verb, resource), n in at_start.items()
        },
    }
    emit(result, args.out, indent=2)


if __name__ == "__main__":
    main()
