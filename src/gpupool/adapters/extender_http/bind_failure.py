"""The one place an exception raised by a bind step becomes a typed refusal (kube-scheduler's
Status from a plugin's error): what bind answers, what /metrics counts, by step and by kind.

- this replica lost the lead (`NotLeader`, the write step's Binding included): `NotLeader`,
  with its message;
- any other failure of the write step: `WriteFailed`, "bind <pod> to <node> failed: <error>";
- the API server answered an error or could not be reached: `ApiError`, naming the step;
- anything else is a bug: `Internal`, logged with its traceback, and the message says only that.
"""

from __future__ import annotations

import logging

from gpupool.adapters.extender_http.bind_state import Step
from gpupool.adapters.extender_http.refusal import Refusal, Why
from gpupool.adapters.kubernetes.errors import ApiServerError
from gpupool.adapters.kubernetes.leader import NotLeader

log = logging.getLogger(__name__)

INTERNAL = (
    "gpupool extender: bind failed on an internal error (its log has the details); "
    "kube-scheduler tries the pod again"
)


def refusal_for(step: Step, err: Exception, pod_ref: str, node: str) -> Refusal:
    """The typed refusal for `err`, raised by `step` of binding `pod_ref` to `node`."""
    if isinstance(err, NotLeader):
        return Refusal(Why.NOT_LEADER, str(err))
    if step is Step.WRITE:
        return Refusal(Why.WRITE_FAILED, f"bind {pod_ref} to {node} failed: {err}")
    if isinstance(err, ApiServerError | OSError | TimeoutError):
        return Refusal(
            Why.API_ERROR,
            f"bind {pod_ref} to {node} failed at its {step} step: {err}; kube-scheduler tries "
            f"the pod again",
        )
    log.error("bind %s to %s failed at its %s step", pod_ref, node, step, exc_info=err)
    return Refusal(Why.INTERNAL, INTERNAL)
