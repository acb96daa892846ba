"""Pure conversions between Kubernetes objects and domain values, and the extender's cache."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from support.builders import node_json

from gpupool.adapters.extender_http.fit import lay_out_slices
from gpupool.adapters.extender_http.prioritize import cpu_pod_scores, pick_scores
from gpupool.adapters.extender_http.refusal import Refusal, Why
from gpupool.adapters.kubernetes.errors import InvalidObject
from gpupool.adapters.kubernetes.lease import lease_from_json, lease_to_json
from gpupool.adapters.kubernetes.node import node_condition, node_from_json, read_node
from gpupool.adapters.kubernetes.pod import allocation_annotation, slices_from_annotation
from gpupool.adapters.kubernetes.reporter import gpunode_status
from gpupool.adapters.wire.json_pointer import escape, pointer
from gpupool.adapters.wire.quotas import read_quota
from gpupool.domain.allocations import Allocation, Slice
from gpupool.domain.devices import Gpu
from gpupool.domain.errors import InvalidQuantity, InvalidQuota, InvalidRequest
from gpupool.domain.quantity import parse_quantity, quantity_int
from gpupool.domain.units import GiB
from gpupool.node.agent import node_report
from gpupool.ports import InventoryFacts
from gpupool.quota.lease import LeasePhase
from gpupool.quota.resource import Resource
from gpupool.state.cluster import ClusterCache
from gpupool.state.lease import LeaseRecord, PodRef


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("12Gi", 12 * GiB),
        ("500m", Fraction(1, 2)),
        ("1.5", Fraction(3, 2)),
        ("2e3", 2000),
        (4, 4),
        ("1k", 1000),
    ],
)
def test_quantities(text: object, value: object) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("bad", ["12 GB", "", "Gi", None, True, "1.2.3"])
def test_bad_quantities_raise_one_typed_error(bad: object) -> None:
    with pytest.raises(InvalidQuantity):
        parse_quantity(bad)


def test_quantity_int_rounds_up() -> None:
    assert quantity_int("1.0001", scale=1000) == 1001


def lease() -> LeaseRecord:
    return LeaseRecord(
        name="uid-1",
        namespace="team-a",
        tenant="team-a",
        pod=PodRef("team-a", "p", "uid-1"),
        node="n1",
        slices=(Slice(2, "GPU-2", "A100-80GB", 12 * GiB, 12 * GiB, 300),),
        amount=12 * GiB,
        borrowed=4 * GiB,
        priority=5,
    )


def test_lease_round_trips_through_json() -> None:
    obj = lease_to_json(lease())
    assert obj["spec"]["devices"][0]["computePercent"] == 30
    assert obj["metadata"]["labels"]["gpupool.io/node"] == "n1"
    assert lease_from_json(obj) == lease()


def test_a_lease_without_devices_names_the_field() -> None:
    obj = lease_to_json(lease())
    del obj["spec"]["devices"]
    with pytest.raises(InvalidObject, match="devices"):
        lease_from_json(obj)


def test_ended_leases_hold_no_capacity() -> None:
    obj = lease_to_json(lease())
    obj["status"] = {"phase": "Released"}
    assert not lease_from_json(obj).holds_capacity


def test_read_quota() -> None:
    q = read_quota(
        {
            "metadata": {"name": "team-a"},
            "spec": {
                "nominal": "80Gi",
                "guaranteed": "40Gi",
                "cohort": "c",
                "borrowLimit": "20Gi",
                "budget": {"limitHours": 100, "windowSeconds": 86400},
            },
        }
    )
    assert (q.nominal, q.guaranteed, q.borrow_limit) == (80 * GiB, 40 * GiB, 20 * GiB)
    assert q.budget is not None and q.budget.window_s == 86400


def test_gpu_quota_counts_milli_gpu() -> None:
    q = read_quota(
        {
            "metadata": {"name": "t"},
            "spec": {"resource": "gpu", "nominal": "4", "guaranteed": "500m"},
        }
    )
    assert (q.resource, q.nominal, q.guaranteed) == (Resource.GPU, 4000, 500)


def test_quota_guaranteed_above_nominal_is_rejected_naming_the_quota() -> None:
    with pytest.raises(InvalidQuota, match=r"tenant 'team-a': guaranteed .* above the nominal"):
        read_quota(
            {"metadata": {"name": "team-a"}, "spec": {"nominal": "10Gi", "guaranteed": "20Gi"}}
        )


GPU_LABELS = {"gpupool.io/gpu-model": "A100-80GB", "gpupool.io/gpu-count": "2"}


def test_node_from_labels_keeps_the_reserve_back() -> None:
    node = node_from_json(node_json("n1", labels=GPU_LABELS))
    assert [g.total_memory for g in node.gpus] == [72 * GiB, 72 * GiB]


def test_gpunode_wins_over_labels_and_its_health_fences_the_node() -> None:
    gpunode = {
        "metadata": {"name": "n1"},
        "status": {
            "health": "Suspect",
            "conditions": [
                {"type": "Heartbeat", "status": "False", "message": "no heartbeat for 95s"}
            ],
            "devices": [
                {
                    "index": 0,
                    "model": "H100",
                    "uuid": "G0",
                    "memoryBytes": 80 * GiB,
                    "allocatableBytes": 70 * GiB,
                }
            ],
        },
    }
    node = node_from_json(node_json("n1", labels=GPU_LABELS), gpunode)
    assert [(g.model, g.total_memory) for g in node.gpus] == [("H100", 70 * GiB)]
    assert node_condition(node_json("n1"), gpunode) == "node suspect: no heartbeat for 95s"


def test_a_gpunode_with_an_unknown_model_is_an_invalid_object() -> None:
    gpunode = {
        "metadata": {"name": "n1"},
        "status": {"devices": [{"index": 0, "model": "Z9", "memoryBytes": 1}]},
    }
    with pytest.raises(InvalidObject, match="GpuNode n1"):
        node_from_json(node_json("n1"), gpunode)


def test_cache_assume_and_forget_of_a_lease_are_exact_inverses() -> None:
    cache = ClusterCache()
    cache.rebuild([read_node(n) for n in [node_json("n1", labels=GPU_LABELS)]], [], [])
    before = cache.snapshot().state_key()
    held = LeaseRecord(
        "u",
        "ns",
        "t",
        PodRef("ns", "p", "u"),
        "n1",
        (Slice(1, "GPU-n1-1", "A100-80GB", 0, 30 * GiB, 0),),
    )
    cache.set_lease(held)
    snap = cache.snapshot()
    assert int(snap.gmem_free[0, 1]) == 42 * GiB
    cache.set_lease(held)  # the watch echo of our own create changes nothing
    assert int(snap.gmem_free[0, 1]) == 42 * GiB
    cache.delete_lease("ns/u")
    assert cache.snapshot().state_key() == before


def test_a_lease_that_does_not_fit_fences_its_node_instead_of_vanishing() -> None:
    cache = ClusterCache()
    cache.rebuild([read_node(n) for n in [node_json("n1", labels=GPU_LABELS)]], [], [])
    too_big = LeaseRecord(
        "u",
        "ns",
        "t",
        PodRef("ns", "p", "u"),
        "n1",
        (Slice(0, "GPU-n1-0", "A100-80GB", 0, 90 * GiB, 0),),
    )
    cache.set_lease(too_big)
    snap = cache.snapshot()
    assert not snap.schedulable[0]
    assert "does not fit" in (snap.condition[0] or "")
    cache.delete_lease("ns/u")
    assert cache.snapshot().schedulable[0]


def test_resync_counts_drift() -> None:
    cache = ClusterCache()
    cache.rebuild([read_node(n) for n in [node_json("n1", labels=GPU_LABELS)]], [], [])
    missed = LeaseRecord(
        "u",
        "ns",
        "t",
        PodRef("ns", "p", "u"),
        "n1",
        (Slice(0, "GPU-n1-0", "A100-80GB", 0, GiB, 0),),
    )
    drift = cache.rebuild(
        [read_node(n) for n in [node_json("n1", labels=GPU_LABELS)]], [], [missed]
    )
    assert (drift.nodes, drift.leases) == (0, 1)


def _held(uid: str, *slices: Slice, phase: LeasePhase = LeasePhase.RESERVED) -> LeaseRecord:
    return LeaseRecord(uid, "ns", "t", PodRef("ns", uid, uid), "n1", slices, phase=phase)


def test_bind_lays_a_slice_out_in_the_free_ranges_of_the_live_leases() -> None:
    node = node_from_json(node_json("n1", labels=GPU_LABELS))  # 2 cards of 72Gi
    card = (0, "GPU-n1-0", "A100-80GB")
    leases = [
        _held("a", Slice(*card, 0, 20 * GiB, 0)),
        _held("b", Slice(*card, 30 * GiB, 20 * GiB, 0)),
        _held("c", Slice(*card, 60 * GiB, 10 * GiB, 0)),
        _held("gone", Slice(*card, 20 * GiB, 10 * GiB, 0), phase=LeasePhase.RELEASED),
    ]
    # free on card 0: [20, 30), [50, 60), [70, 72) Gi: 22Gi, no one range longer than 10Gi
    one = lay_out_slices(node, leases, [Slice(*card, 0, 8 * GiB, 0)])
    assert not isinstance(one, Refusal)
    assert (one[0].offset_bytes, one[0].ranges) == (20 * GiB, ((20 * GiB, 8 * GiB),))
    split = lay_out_slices(node, leases, [Slice(*card, 0, 21 * GiB, 0)])
    assert not isinstance(split, Refusal)
    assert split[0].offset_bytes == 20 * GiB
    assert split[0].extents == ((20 * GiB, 10 * GiB), (50 * GiB, 10 * GiB), (70 * GiB, GiB))
    refused = lay_out_slices(node, leases, [Slice(*card, 0, 23 * GiB, 0)])
    assert refused == Refusal(Why.CHANGED, f"GPU 0 on n1 has {22 * GiB} bytes free")
    assert lay_out_slices(node, leases, [Slice(5, "G5", "A100-80GB", 0, GiB, 0)]) == Refusal(
        Why.CHANGED, "GPU 5 is not on node n1"
    )


def test_a_split_slice_round_trips_through_the_lease_and_the_annotation() -> None:
    split = Slice(
        2, "GPU-2", "A100-80GB", 4 * GiB, 12 * GiB, 300, ((4 * GiB, 8 * GiB), (40 * GiB, 4 * GiB))
    )
    record = LeaseRecord("u", "ns", "t", PodRef("ns", "p", "u"), "n1", (split,), amount=12 * GiB)
    obj = lease_to_json(record)
    assert obj["spec"]["devices"][0]["extents"] == [
        {"offsetBytes": 4 * GiB, "sizeBytes": 8 * GiB},
        {"offsetBytes": 40 * GiB, "sizeBytes": 4 * GiB},
    ]
    assert lease_from_json(obj) == record
    text = allocation_annotation(Allocation("p", "n1", 0, 0, (split,)))
    assert slices_from_annotation(text) == (split,)
    # one range is written as one extent and read back as the implicit one
    assert lease_to_json(lease())["spec"]["devices"][0]["extents"] == [
        {"offsetBytes": 12 * GiB, "sizeBytes": 12 * GiB}
    ]


def test_a_lease_written_before_extents_is_one_range() -> None:
    obj = lease_to_json(lease())
    del obj["spec"]["devices"][0]["extents"]
    got = lease_from_json(obj)
    assert got == lease()
    assert got.slices[0].ranges == ((12 * GiB, 12 * GiB),)
    old = '[{"uuid":"G","index":0,"model":"A100-80GB","offsetBytes":0,"sizeBytes":5}]'
    assert slices_from_annotation(old)[0].ranges == ((0, 5),)


def test_extents_that_are_no_layout_of_the_slice_are_a_typed_error() -> None:
    obj = lease_to_json(lease())
    obj["spec"]["devices"][0]["extents"] = [{"offsetBytes": 12 * GiB, "sizeBytes": GiB}]
    with pytest.raises(InvalidObject, match="add up to"):
        lease_from_json(obj)
    obj["spec"]["devices"][0]["extents"] = [{"offsetBytes": 12 * GiB}]
    with pytest.raises(InvalidObject, match="sizeBytes"):
        lease_from_json(obj)
    bad = (
        '[{"uuid":"G","index":0,"model":"A100-80GB","offsetBytes":0,"sizeBytes":5,'
        '"extents":[{"offsetBytes":0,"sizeBytes":3},{"offsetBytes":2,"sizeBytes":2}]}]'
    )
    with pytest.raises(InvalidRequest, match="not after"):
        slices_from_annotation(bad)


def _pick(values: list[float], rows: list[int]) -> list[int]:
    out: list[int] = pick_scores(np.array(values), np.array(rows)).tolist()
    return out


def test_the_planners_pick_alone_gets_ten() -> None:
    assert _pick([1.0, 5.0, 4.0], [0, 1, 2]) == [0, 10, 4]  # the rest onto 0..5
    assert _pick([np.nan, 1.0, 2.0], [0, 1, 2]) == [0, 0, 10]  # NaN: no score
    assert _pick([np.nan, np.nan], [-1, 0]) == [0, 0]


def test_among_equal_best_scores_the_first_node_by_name_is_the_pick() -> None:
    # kube-scheduler's order is not the snapshot's: the lowest row (first name) wins, as in
    # the simulator, not the first name kube-scheduler listed
    assert _pick([4.0, 4.0, 4.0], [7, 2, 5]) == [5, 10, 5]
    assert _pick([4.0, 1.0, 4.0], [9, 0, 3]) == [5, 0, 10]


def test_a_pod_without_gpu_prefers_nodes_without_gpus_then_the_first_gpu_node() -> None:
    scores = cpu_pod_scores(np.array([4, -1, 2, 9, -1])).tolist()
    assert scores == [0, 10, 5, 0, 10]
    assert cpu_pod_scores(np.array([3, 1])).tolist() == [0, 5]
    assert cpu_pod_scores(np.array([], dtype=np.int64)).tolist() == []


def test_json_pointer_escapes_tilde_before_slash() -> None:
    assert pointer("metadata", "annotations", "gpupool.io/queue") == (
        "/metadata/annotations/gpupool.io~1queue"
    )
    assert escape("a~1/b") == "a~01~1b"  # read back: "a~1/b", not "a//b"
    assert pointer("spec", "containers", 0) == "/spec/containers/0"


def test_a_gpunode_reports_each_cards_share_count_and_an_older_one_means_ten() -> None:
    def gpunode(**device: object) -> dict[str, object]:
        card = {"index": 0, "model": "H100", "uuid": "G0", "memoryBytes": 80 * GiB, **device}
        return {"metadata": {"name": "n1"}, "status": {"devices": [card]}}

    assert [g.shares for g in node_from_json(node_json("n1"), gpunode(shares=4)).gpus] == [4]
    assert [g.shares for g in node_from_json(node_json("n1"), gpunode()).gpus] == [10]
    with pytest.raises(InvalidObject, match="share count must be 1 or more"):
        node_from_json(node_json("n1"), gpunode(shares=0))


def test_the_agent_reports_the_device_plugins_share_count_on_every_card() -> None:
    gpus = (Gpu(index=0, model="H100", uuid="G0"), Gpu(index=1, model="H100", uuid="G1"))
    report = node_report("n1", gpus, InventoryFacts("550", "12.4", ()), 10.0, shares_per_card=7)
    status = gpunode_status(report)
    assert [d["shares"] for d in status["devices"]] == [7, 7]
    decoded = node_from_json(node_json("n1"), {"metadata": {"name": "n1"}, "status": status})
    assert [g.shares for g in decoded.gpus] == [7, 7]
