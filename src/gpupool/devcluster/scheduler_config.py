"""The KubeSchedulerConfiguration the dev cluster's kube-scheduler runs with.

Plain by default. Given an extender (gpupool's scheduler extender), kube-scheduler calls its
filter, prioritize and bind verbs for pods that request gpupool's resources; the scheduler itself
then ignores those resources (the extender accounts for them per card). A second, ignorable entry
asks the extender's `prioritize-cpu` about every other pod, so pods without a GPU pack onto as
few GPU nodes as they need (kube-scheduler alone spreads them, stranding GPUs); kube-scheduler
scores every feasible node (`percentageOfNodesToScore: 100`), so the planner's pick is among
them (docs/extender.md says why each number is what it is).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpupool.adapters.wire.names import RES_VGPU, USER_RESOURCES

VGPU_RESOURCE = RES_VGPU
# The pod resources a user writes (DESIGN section 3); no node advertises them, so kube-scheduler
# must leave them to the extender too (its NodeResourcesFit would otherwise reject every node).
GPU_RESOURCES = USER_RESOURCES
# the planner's pick (10) beats any other node (5 at most) by 5 x 10 x 5 = 250 points, more than
# kube-scheduler's resource-spreading scores can differ (extender_http/prioritize.py)
EXTENDER_WEIGHT = 5


@dataclass(frozen=True, slots=True)
class ExtenderConfig:
    url_prefix: str
    weight: int = EXTENDER_WEIGHT
    http_timeout_s: float = 5.0
    filter_verb: str = "filter"
    prioritize_verb: str = "prioritize"
    cpu_prioritize_verb: str = "prioritize-cpu"
    # every pod of the cluster waits on the second entry: a slow or absent extender is skipped
    # (ignorable) after at most this long
    cpu_http_timeout_s: float = 2.0
    bind_verb: str = "bind"
    managed_resource: str = VGPU_RESOURCE
    also_managed: tuple[str, ...] = GPU_RESOURCES
    # TLS towards an https extender: the CA its serving certificate is checked against, and the
    # client certificate kube-scheduler presents (the extender binds only for its holder)
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None

    def to_json(self) -> dict[str, Any]:
        tls = self._tls()
        entry: dict[str, Any] = {
            "urlPrefix": self.url_prefix,
            "filterVerb": self.filter_verb,
            "prioritizeVerb": self.prioritize_verb,
            "bindVerb": self.bind_verb,
            "weight": self.weight,
            "nodeCacheCapable": True,
            "enableHTTPS": self.url_prefix.startswith("https://"),
            "httpTimeout": f"{self.http_timeout_s:g}s",
            "managedResources": [
                {"name": name, "ignoredByScheduler": True}
                for name in (self.managed_resource, *self.also_managed)
            ],
        }
        if tls:
            entry["tlsConfig"] = tls
        return entry

    def entries(self) -> list[dict[str, Any]]:
        """The `extenders` list: gpupool's pods (`to_json`), then every other pod's score."""
        return [self.to_json(), self.cpu_entry_json()]

    def cpu_entry_json(self) -> dict[str, Any]:
        """The second entry: `prioritize-cpu` for every pod (no managedResources), nothing
        else, ignorable."""
        entry: dict[str, Any] = {
            "urlPrefix": self.url_prefix,
            "prioritizeVerb": self.cpu_prioritize_verb,
            "weight": self.weight,
            "nodeCacheCapable": True,
            "enableHTTPS": self.url_prefix.startswith("https://"),
            "httpTimeout": f"{self.cpu_http_timeout_s:g}s",
            "ignorable": True,
        }
        tls = self._tls()
        if tls:
            entry["tlsConfig"] = tls
        return entry

    def _tls(self) -> dict[str, str]:
        """The entry's tlsConfig: the files that are set."""
        return {
            key: str(path)
            for key, path in (
                ("caFile", self.ca_file), ("certFile", self.cert_file), ("keyFile", self.key_file)
            )
            if path is not None
        }  # fmt: skip


def scheduler_configuration(
    kubeconfig: Path, extender: ExtenderConfig | None = None
) -> dict[str, Any]:
    """The configuration as a JSON-ready dict; no leader election (a single scheduler)."""
    config: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": 200, "burst": 400},
        "leaderElection": {"leaderElect": False},
    }
    if extender is not None:
        config["percentageOfNodesToScore"] = 100
        config["extenders"] = extender.entries()
    return config


def write_scheduler_configuration(
    path: Path, kubeconfig: Path, extender: ExtenderConfig | None = None
) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(scheduler_configuration(kubeconfig, extender), sort_keys=False))
    return path
