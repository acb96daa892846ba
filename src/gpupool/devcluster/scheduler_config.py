"""The KubeSchedulerConfiguration the dev cluster's kube-scheduler runs with.

Plain by default. Given an extender (gpupool's scheduler extender), kube-scheduler calls its
filter, prioritize and bind verbs for pods that request `gpupool.io/vgpu`; the scheduler itself
then ignores that resource (the extender accounts for it per card).
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


@dataclass(frozen=True, slots=True)
class ExtenderConfig:
    url_prefix: str
    weight: int = 1
    http_timeout_s: float = 5.0
    filter_verb: str = "filter"
    prioritize_verb: str = "prioritize"
    bind_verb: str = "bind"
    managed_resource: str = VGPU_RESOURCE
    also_managed: tuple[str, ...] = GPU_RESOURCES
    # TLS towards an https extender: the CA its serving certificate is checked against, and the
    # client certificate kube-scheduler presents (the extender binds only for its holder)
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None

    def to_json(self) -> dict[str, Any]:
        tls = {
            key: str(path)
            for key, path in (
                ("caFile", self.ca_file), ("certFile", self.cert_file), ("keyFile", self.key_file)
            )
            if path is not None
        }  # fmt: skip
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
        config["extenders"] = [extender.to_json()]
    return config


def write_scheduler_configuration(
    path: Path, kubeconfig: Path, extender: ExtenderConfig | None = None
) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(scheduler_configuration(kubeconfig, extender), sort_keys=False))
    return path
