"""What the API server is asked, counted from its own /metrics and from an audit log.

Shared by bench/devcluster_up.py and bench/live_replay.py. `apiserver_request_total` is read
twice and subtracted (labels parsed by name: their order varies between lines); the audit log
(`install_audit`: kube-apiserver with one Metadata line per list/watch request) names the client,
and each gpupool component runs as its own ServiceAccount, so the user names the component.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

from gpupool.devcluster import control_plane
from gpupool.devcluster.apiclient import KubeApi

AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [list, watch]
- level: None
"""

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_SERVICE_ACCOUNT = "system:serviceaccount:gpupool-system:"


def request_counts(metrics: str) -> Counter[tuple[str, str]]:
    """apiserver_request_total summed by (verb, resource[/subresource]); labels parsed by name."""
    counts: Counter[tuple[str, str]] = Counter()
    for line in metrics.splitlines():
        match = _SAMPLE.match(line)
        if match is None or match["name"] != "apiserver_request_total":
            continue
        labels = dict(_LABEL.findall(match["labels"]))
        resource = labels.get("resource", "")
        if labels.get("subresource"):
            resource += "/" + labels["subresource"]
        counts[(labels.get("verb", ""), resource)] += int(float(match["value"]))
    return counts


def install_audit(policy_dir: Path) -> Path:
    """kube-apiserver with an audit log of list/watch requests; returns the log's path.
    Call before the cluster comes up (it wraps `control_plane.apiserver_argv`)."""
    policy = policy_dir / "audit-policy.yaml"
    policy.write_text(AUDIT_POLICY)
    log = policy_dir / "audit.log"
    inner = control_plane.apiserver_argv

    def argv(*args: Any, **kwargs: Any) -> list[str]:
        return [
            *inner(*args, **kwargs),
            f"--audit-policy-file={policy}",
            f"--audit-log-path={log}",
            "--audit-log-format=json",
            "--audit-log-maxsize=0",
        ]

    control_plane.apiserver_argv = argv
    return log


def lists_by_client(audit_log: Path, start: int, end: int) -> Counter[tuple[str, str]]:
    """LIST requests by (client, resource) in the audit log's bytes `start` to `end`."""
    by_user: Counter[tuple[str, str]] = Counter()
    with audit_log.open("rb") as f:
        f.seek(start)
        for line in f.read(end - start).splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("verb") != "list":
                continue
            user = str((event.get("user") or {}).get("username", "?"))
            user = user.removeprefix(_SERVICE_ACCOUNT)
            ref = event.get("objectRef") or {}
            by_user[(user, str(ref.get("resource", "?")))] += 1
    return by_user


class RequestWindow:
    """LIST/WATCH requests from `start` to `finish`, per minute (by resource; by client too when
    there is an audit log), leaving out what comes between a `suspend` and its `resume`."""

    def __init__(self, api: KubeApi, audit_log: Path | None) -> None:
        self.api = api
        self.audit_log = audit_log
        self.counts: Counter[tuple[str, str]] = Counter()
        self.clients: Counter[tuple[str, str]] = Counter()
        self.active_s = 0.0
        self._resume()

    def _offset(self) -> int:
        log = self.audit_log
        return log.stat().st_size if log is not None and log.exists() else 0

    def _resume(self) -> None:
        self.before = request_counts(str(self.api.get("/metrics")))
        self.offset = self._offset()
        self.started = time.monotonic()

    def suspend(self) -> None:
        self.active_s += time.monotonic() - self.started
        self.counts.update(request_counts(str(self.api.get("/metrics"))) - self.before)
        if self.audit_log is not None and self.audit_log.exists():
            self.clients.update(lists_by_client(self.audit_log, self.offset, self._offset()))

    def resume(self) -> None:
        self._resume()

    def finish(self) -> dict[str, Any]:
        self.suspend()
        per_min = 60.0 / self.active_s
        by_resource: dict[str, dict[str, float]] = {}
        for (verb, resource), value in sorted(self.counts.items()):
            if verb in ("LIST", "WATCH") and value > 0:
                by_resource.setdefault(verb, {})[resource] = round(value * per_min, 1)
        out: dict[str, Any] = {
            "window_s": round(self.active_s, 1),
            "per_minute_by_resource": by_resource,
            "list_per_minute_total": round(sum(by_resource.get("LIST", {}).values()), 1),
        }
        if self.audit_log is not None:
            table: dict[str, dict[str, float]] = {}
            for (user, resource), value in sorted(self.clients.items()):
                table.setdefault(user, {})[resource] = round(value * per_min, 1)
            out["list_per_minute_by_client"] = table
            out["list_per_minute_by_client_total"] = {
                user: round(sum(v.values()), 1) for user, v in table.items()
            }
        return out
