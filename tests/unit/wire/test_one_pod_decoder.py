"""gpupool has one pod decoder: `adapters/kubernetes/pod_view.py` (`read_pod`, remembered per uid
and resourceVersion in `adapters/kubernetes/decoded.py`). The extender's `ScheduledPod` and the
controllers' `PodView` are the value it returns; nothing else in `src/` parses a pod's gpupool.io
annotations.

Checked over the syntax tree of every module under `src/gpupool`, as `test_names_spelled_once`:

- the per-annotation parsers of `adapters/wire` (the pod's request, gang, admitted record,
  notices, lease terms, claim ask, allocation) are named only in the decoder;
- no module reads a pod annotation by its `names` constant (`annotations.get(ANN_ADMITTED)`,
  `annotations[ANN_CLAIM]`) but the decoder.

Outside the rule, each for a stated reason: `adapters/wire` (the parsers themselves),
`adapters/webhook` (it validates the pod being created: the admission review is its own edge,
before the pod has a uid or a resourceVersion to remember it by), `adapters/kubernetes/audit.py`
(the invariant auditor reads the API server's JSON on its own, so that a decoder bug cannot hide
a violation), and the known readers listed in `KNOWN` (to be folded into the decoder; the test
fails when one of them no longer reads, so the list only shrinks).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

from gpupool.adapters.extender_http.refusal import Why
from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod
from gpupool.adapters.extender_http.wire import ExtenderArgs
from gpupool.adapters.kubernetes.decoded import read_pod
from gpupool.adapters.wire import names
from gpupool.domain.compute_modes import WorkloadClass

SRC = Path(__file__).resolve().parents[3] / "src" / "gpupool"
DECODER = Path("adapters/kubernetes/pod_view.py")
EXEMPT_DIRS = (Path("adapters/wire"), Path("adapters/webhook"))
EXEMPT_FILES = (Path("adapters/kubernetes/audit.py"),)
# Readers left over, each to be folded into the decoder (none now: the DRA allocator's claim ask
# and claim name are `PodView.claim_ask` and `claim_name`).
KNOWN: set[Path] = set()

# adapters/wire's parsers of what a pod's annotations say
PARSERS = frozenset(
    {
        "read_pod_gpu",
        "read_gang",
        "read_admitted",
        "parse_admitted",
        "parse_notice",
        "capped_pod_ttl",
        "from_annotation",
        "slices_from_annotation",
    }
)
# the pod annotations' constants in names.py (users' and the system's)
_POD_VALUES = {
    *names.USER_ANNOTATIONS,
    *names.LEASE_ANNOTATIONS,
    *names.SYSTEM_ANNOTATIONS,
    names.ANN_GANG_SIZE,
    names.ANN_ADOPT_NVIDIA_GPU,
}
POD_ANNOTATIONS = frozenset(
    n for n in dir(names) if n.startswith("ANN_") and getattr(names, n) in _POD_VALUES
)


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def pod_reads(source: str) -> list[tuple[int, str]]:
    """The (line, what) of each place `source` parses a pod annotation itself."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            found += [(node.lineno, a.name) for a in node.names if a.name in PARSERS]
        elif isinstance(node, ast.Call) and _name(node.func) in PARSERS:
            found.append((node.lineno, str(_name(node.func))))
        elif isinstance(node, ast.Call) and _name(node.func) == "get" and node.args:
            key = _name(node.args[0])
            if key in POD_ANNOTATIONS:
                found.append((node.lineno, f"get({key})"))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            key = _name(node.slice)
            if key in POD_ANNOTATIONS:
                found.append((node.lineno, f"[{key}]"))
    return sorted(found)


def _ruled(path: Path) -> bool:
    rel = path.relative_to(SRC)
    if rel == DECODER or rel in EXEMPT_FILES:
        return False
    return not any(rel.is_relative_to(d) for d in EXEMPT_DIRS)


def test_the_rule_sees_reads_and_not_writes() -> None:
    source = (
        "from gpupool.adapters.wire.gangs import read_gang\n"
        "a = annotations.get(names.ANN_ADMITTED)\n"
        "b = annotations[ANN_CLAIM]\n"
        "annotations[names.ANN_QUEUE] = 'x'\n"  # a write: the patch a controller sends
        "c = {names.ANN_LEASE: key}\n"
        "d = parse_notice(text)\n"
        "e = node.get(names.ANN_DEFRAG_MARK)\n"  # a GpuNode's annotation, not a pod's
    )
    assert pod_reads(source) == [
        (1, "read_gang"),
        (2, "get(ANN_ADMITTED)"),
        (3, "[ANN_CLAIM]"),
        (6, "parse_notice"),
    ]


def test_the_pod_annotations_are_the_pods() -> None:
    assert {"ANN_ADMITTED", "ANN_CLAIM", "ANN_GPU_MODEL", "ANN_RENEW"} <= POD_ANNOTATIONS
    assert "ANN_DEFRAG_MARK" not in POD_ANNOTATIONS and "ANN_LEADER_URL" not in POD_ANNOTATIONS


def test_only_the_decoder_parses_pod_annotations() -> None:
    readers = {
        path.relative_to(SRC): reads
        for path in sorted(SRC.rglob("*.py"))
        if _ruled(path) and (reads := pod_reads(path.read_text()))
    }
    offenders = [
        f"{rel}:{line}: {what}"
        for rel, reads in readers.items()
        if rel not in KNOWN
        for line, what in reads
    ]
    assert not offenders, (
        "decode pods with adapters.kubernetes.decoded.read_pod (PodView; the extender's "
        "ScheduledPod.from_json) and add what you need to PodView in pod_view.py:\n"
        + "\n".join(offenders)
    )
    assert set(readers) >= KNOWN, f"no longer a reader, drop from KNOWN: {KNOWN - set(readers)}"
    assert pod_reads((SRC / DECODER).read_text()), "the decoder reads the annotations itself"


def test_a_pod_version_is_decoded_once() -> None:
    pod = {
        "metadata": {
            "name": "p",
            "namespace": "t",
            "uid": "u-1",
            "resourceVersion": "7",
            "labels": {names.LABEL_TENANT: "t"},
        },
        "spec": {"containers": [{"name": "c"}]},
    }
    first = read_pod(pod)
    assert read_pod({**pod}) is first  # the same uid and version: the value already decoded
    newer = {**pod, "metadata": {**pod["metadata"], "resourceVersion": "8"}}
    assert read_pod(newer) is not first


def test_the_extender_reads_the_same_decoded_value_on_every_path() -> None:
    """kube-scheduler's filter body, bind's fresh read and a gang's listing of one pod version
    are one decode: the extender compares a member's uid on the value filter decoded."""
    limits = {names.RES_GPU_MEMORY: "8Gi"}
    pod = {
        "metadata": {"name": "w-0", "namespace": "t", "uid": "u-w0", "resourceVersion": "3"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]},
    }
    filtered = ExtenderArgs.from_json({"Pod": pod, "NodeNames": ["n"]}).pod
    fetched = ScheduledPod.from_json(json.loads(json.dumps(pod)))  # the API server's copy
    assert fetched.view is filtered.view
    assert filtered.request.wants_gpu and filtered.request.gpu_memory_bytes == 8 * 2**30
    assert fetched == filtered


_CLAIM_ASK = json.dumps(
    {"claim": "gpu", "request": "gpu", "memory": 4 * 2**30, "compute": None, "count": 1}
)


def test_the_extender_plans_no_request_of_a_pod_it_must_refuse() -> None:
    bad = {
        "metadata": {"name": "b", "namespace": "t", "uid": "u-b"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {names.RES_GPU: "0"}}}]},
    }
    claim = {
        "metadata": {
            "name": "d",
            "namespace": "t",
            "uid": "u-d",
            "annotations": {names.ANN_CLAIM: _CLAIM_ASK},
        },
        "spec": {"containers": [{"name": "c"}]},
    }
    refused = ScheduledPod.from_json(bad)
    assert not refused.request.wants_gpu and refused.problem is not None
    why = refused.refusal()
    assert why is not None and why.why == Why.BAD_REQUEST
    dra = ScheduledPod.from_json(claim)  # the claim allocator places it, not the extender
    assert dra.view.claim_pod and dra.view.request is not None and dra.problem is None
    assert not dra.request.wants_gpu


def test_the_view_carries_what_bind_reads_and_the_allocation_read_once() -> None:
    limits = {names.RES_GPU_MEMORY: "8Gi"}
    slices = [
        {"index": 0, "uuid": "GPU-a", "model": "A100-80GB", "offsetBytes": 0, "sizeBytes": 8},
    ]
    annotations = {
        names.ANN_PLACEMENT_POLICY: "binpack",
        names.ANN_COMPUTE_MODE: "mps",
        names.ANN_WORKLOAD: "training",
        names.ANN_ALLOCATION: json.dumps(slices),
    }
    pod = {
        "metadata": {"name": "p", "namespace": "t", "uid": "u-p", "annotations": annotations},
        "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]},
    }
    view = read_pod(pod)
    assert (view.placement_policy, view.compute_mode) == ("binpack", "mps")
    assert view.workload is WorkloadClass.TRAINING and not view.claim_pod
    assert view.allocation_models == ("A100-80GB",) and view.allocation[0].uuid == "GPU-a"
    # slices that cannot be read still name their models (admission charges by them)
    broken = [{"model": "H100-80GB"}]
    annotations[names.ANN_ALLOCATION] = json.dumps(broken)
    view = read_pod(pod)
    assert view.allocation == () and view.allocation_problem is not None
    assert view.allocation_models == ("H100-80GB",)
