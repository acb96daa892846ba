"""bench/agent_paths_requests.py: the audit log's LIST/WATCH requests by client, split into
those scoped to one node (a field selector, as the agents ask) and cluster-wide ones."""

from __future__ import annotations

import json
from pathlib import Path

from support.bench import bench_module

bench = bench_module("agent_paths_requests")

AGENT = "system:serviceaccount:gpupool-system:gpupool-agent"


def line(verb: str, resource: str, uri: str, user: str = AGENT) -> str:
    return json.dumps({"verb": verb, "user": {"username": user}, "requestURI": uri,
                       "objectRef": {"resource": resource}})  # fmt: skip


def test_requests_are_counted_by_client_scope_verb_and_resource(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    lines = [
        line("list", "nodes", "/api/v1/nodes?fieldSelector=metadata.name%3Dn1"),
        line("watch", "nodes", "/api/v1/nodes?fieldSelector=metadata.name%3Dn1&watch=true"),
        line("list", "nodes", "/api/v1/nodes?labelSelector=type%3Dkwok"),
        line("list", "nodes", "/api/v1/nodes?labelSelector=type%3Dkwok"),
        line("get", "nodes", "/api/v1/nodes/n1"),  # not a list or watch
        "not json",
        line("list", "pods", "/api/v1/pods", user="admin"),
    ]
    log.write_text("\n".join(lines) + "\n")
    counted = bench.requests_by_client(log, 0, log.stat().st_size)
    assert counted == {
        ("gpupool-agent (one node)", "list", "nodes"): 1,
        ("gpupool-agent (one node)", "watch", "nodes"): 1,
        ("gpupool-agent (cluster-wide)", "list", "nodes"): 2,
        ("admin (cluster-wide)", "list", "pods"): 1,
    }
