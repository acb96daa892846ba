"""The largest values gpupool reads from what anyone but gpupool writes: a pod's annotations, a
Deployment's or StatefulSet's autoscale settings, a GpuQuota's spec.

Each bound is a cluster maximum: no real cluster needs more, and every loop that weighs the value
does work bounded by it rather than by a number a tenant chose (a `max-replicas` of 3,000,000,000
once made the autoscaler build a list of three billion requests). A value beyond its bound is
refused with a message that names the bound: by the CRD schema and the webhook where they see it,
and by the controller's readers (an event on the object, nothing done) where they do not. The
chart's CRDs (`deploy/helm/gpupool/crds/`) carry the same numbers; `tests/unit/domain` checks
that they agree.
"""

from __future__ import annotations

# Replicas an autoscaled workload may be given (`autoscale-min-replicas`, `-max-replicas`).
# Kubernetes is tested to 150,000 pods in a cluster of 5,000 nodes; 10,000 GPU replicas of one
# workload is more than the largest trace cluster gpupool models (6,212 GPUs) could host even
# at a slice per card, and small enough that planning a step of that size stays cheap.
MAX_REPLICAS = 10_000

# The longest duration a tenant may write: a lease's time to live (`gpupool.io/lease-ttl`,
# `leaseTTLSeconds`), the autoscaler's cooldown, a quota's grace period, idle time and budget
# window. A year (leap or not): longer than any lease a shared pool should grant without a
# renewal, and it keeps every deadline (now + duration) a date the wire's RFC 3339 can write.
MAX_DURATION_S = 366 * 24 * 3600

# The most characters of a number or duration read from an annotation or a quantity field: the
# longest sensible value (`1h30m`, `9223372036854775807`, `0.000000001Ei`) is a few dozen; a
# longer one is refused before it is parsed, so parsing costs no more than this.
MAX_SETTING_CHARS = 64

# The largest magnitude of any quantity: Kubernetes holds none above 2**63 - 1
# (k8s.io/apimachinery's resource.Quantity), and gpupool's status fields are int64.
MAX_QUANTITY = 2**63 - 1
# The largest power of ten a quantity's exponent may name (`2e3`): beyond it, no mantissa short
# enough to be read keeps the value within MAX_QUANTITY or above a nano-unit.
MAX_EXPONENT = 100

# A GpuQuota's quantities (nominal, guaranteed, borrowLimit, lendLimit).
# gpu-memory: 1 EiB, 13 million 80 GiB cards, thousands of times the largest cluster Kubernetes
# supports (5,000 nodes of 8 cards of 192 GiB is 7.5 PiB), and far inside int64.
MAX_QUOTA_BYTES = 2**60
# gpu (and computeLimit): a million GPUs (counted in milli-GPU: 10**9), as far beyond any
# cluster; a larger number is a memory size written under `resource: gpu` by mistake.
MAX_QUOTA_GPUS = 1_000_000
# maxPods: a million pods, beyond Kubernetes' tested 150,000 per cluster.
MAX_QUOTA_PODS = 1_000_000
# budget.limitHours: the most resource-hours a window of MAX_DURATION_S could meter at the
# largest quota (2**30 GiB for 8,784 h is about 9.4e12 GiB-hours).
MAX_BUDGET_HOURS = 10**13


def format_duration(seconds: float) -> str:
    """A bound's duration as a tenant would write it (`366d` as `8784h`, `30s`)."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    return f"{seconds:g}s"


MAX_DURATION_TEXT = format_duration(MAX_DURATION_S)  # "8784h"
MAX_QUOTA_MEMORY_TEXT = "1Ei"  # MAX_QUOTA_BYTES as a quantity
