"""A PriorityClass a test's pods can name the moment it returns.

The API server's Priority admission plugin reads PriorityClasses from its own informer, so a pod
created just after its class may be refused ("no PriorityClass with name ... was found"); a CI
run failed on exactly that. `priority_class` creates the class and then asks admission itself,
with a dry-run pod in `default` (no gpupool webhook there, nothing stored), until it is known.
"""

from __future__ import annotations

from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.errors import ApiError
from support.builders import pod_json
from support.waiting import wait_until

PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"


def _admitted(api: KubeApi, name: str) -> bool:
    probe = pod_json("priority-probe", priority_class=name, grace_s=0)
    try:
        api.create("/api/v1/namespaces/default/pods?dryRun=All", probe)
    except ApiError as err:
        if "no PriorityClass" in str(err):
            return False
        raise
    return True


def priority_class(api: KubeApi, name: str, value: int, *, preempts: bool = False) -> str:
    """Create PriorityClass `name` of `value` (never preempting unless `preempts`); return its
    name once pod admission knows it."""
    body = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        **({} if preempts else {"preemptionPolicy": "Never"}),
    }
    api.create(PRIORITY_CLASSES, body)
    wait_until(lambda: _admitted(api, name), 30, f"pod admission to know PriorityClass {name}")
    return name
