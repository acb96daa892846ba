"""The one notices writer (`controllers.notices.write`) against the in-memory cluster: the notice
annotation and its Event, the eviction and the kind's mark on the GpuLease, a refusal written
once, a withdrawal; a tally hears what went through; with a containment, one pod's failed write
fails only that pod."""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

import pytest
from fake_cluster import FakeCluster, lease_json, pod_json

from gpupool.adapters.kubernetes.decoded import reference_of
from gpupool.adapters.kubernetes.leader import NotLeader
from gpupool.adapters.kubernetes.pod_view import read_pod
from gpupool.adapters.wire.reclaim_notice import notice_annotation
from gpupool.adapters.wire.times import format_time
from gpupool.controllers.contain import Containment
from gpupool.controllers.isolation import ObjectRef
from gpupool.controllers.notices.plan import (
    EvictPod,
    NoticePod,
    WithdrawNotice,
    new_notice,
)
from gpupool.controllers.notices.write import (
    NoticeKind,
    OutcomeTally,
    evict,
    give_notice,
    withdraw,
    write_notices,
)
from gpupool.ports import ClusterApi, Json
from gpupool.state.lease import ReclaimRecord
from gpupool.state.lease_writes import EvictionMark
from gpupool.state.listed import ObjectReference
from gpupool.state.notice import ReclaimNotice

NOW = 1_767_225_600.0
STAMP = format_time(NOW)
ANN = "gpupool.io/reclaim-notice"


def record(eviction: EvictPod, now: float) -> EvictionMark:
    return EvictionMark(ReclaimRecord(now, "Test", eviction.message))


KIND = NoticeKind(
    step="test",
    annotation=ANN,
    noticed="TestNotice",
    evicted="TestEvicted",
    withdrawn="TestWithdrawn",
    purpose=lambda eviction: f"a test for {eviction.notice.claimant}",
    lease_record=record,
)


class Tally:
    def __init__(self) -> None:
        self.heard: list[tuple[str, str]] = []

    def noticed(self, item: NoticePod) -> None:
        self.heard.append(("noticed", item.pod.name))

    def evicted(self, item: EvictPod) -> None:
        self.heard.append(("evicted", item.pod.name))

    def blocked(self, item: EvictPod) -> None:
        self.heard.append(("blocked", item.pod.name))

    def withdrawn(self, item: WithdrawNotice) -> None:
        self.heard.append(("withdrawn", item.pod.name))


class Outcomes:
    def __init__(self) -> None:
        self.heard: list[tuple[str, str]] = []

    def noticed(self, reason: str) -> None:
        self.heard.append(("noticed", reason))

    def evicted(self, reason: str) -> None:
        self.heard.append(("evicted", reason))


def cluster(*names: str, notice: ReclaimNotice | None = None) -> FakeCluster:
    notes = {ANN: notice_annotation(notice)} if notice is not None else None
    pods = [pod_json(n, "beta", node="n1", phase="Running", annotations=notes) for n in names]
    leases = [lease_json(p) for p in pods]
    return FakeCluster(pods=pods, leases=leases)


def annotation(api: FakeCluster, name: str) -> dict[str, Any] | None:
    text = api.pods[f"ns/{name}"]["metadata"]["annotations"].get(ANN)
    return None if text is None else cast(dict[str, Any], json.loads(text))


def _ref(pod: Json) -> ObjectReference:
    return reference_of("Pod", pod)


def run(work: Any) -> Any:
    return asyncio.run(work)


def test_a_notice_is_annotated_with_a_warning_event_and_tallied() -> None:
    api = cluster("b1")
    pod = api.pods["ns/b1"]
    item = NoticePod(read_pod(pod), new_notice(NOW, 30, "alpha", "ns/a1"), "you will go")
    tally = Tally()
    assert run(give_notice(cast(ClusterApi, api), KIND, _ref(pod), item, STAMP, tally))
    written = annotation(api, "b1")
    assert written is not None and written["evictAt"] == format_time(NOW + 30)
    assert api.events == [("ns/b1", "TestNotice", "you will go")]
    assert tally.heard == [("noticed", "b1")]


def test_a_replaced_pod_gets_no_notice() -> None:
    api = cluster("b1")
    pod = api.pods["ns/b1"]
    item = NoticePod(read_pod(pod), new_notice(NOW, 30, "alpha", "ns/a1"), "you will go")
    api.pods["ns/b1"]["metadata"]["uid"] = "uid-new"  # same name, another pod: the test fails
    tally = Tally()
    assert not run(give_notice(cast(ClusterApi, api), KIND, _ref(pod), item, STAMP, tally))
    assert api.events == [] and tally.heard == []


def test_an_eviction_marks_the_lease_then_records_the_event() -> None:
    notice = new_notice(NOW - 30, 30, "alpha", "ns/a1")
    api = cluster("b1", notice=notice)
    pod = api.pods["ns/b1"]
    tally = Tally()
    eviction = EvictPod(read_pod(pod), notice, "evicted for alpha")
    assert run(evict(cast(ClusterApi, api), KIND, _ref(pod), eviction, NOW, tally))
    assert "ns/b1" not in api.pods
    assert api.written("patch_lease_status") == [
        ("ns/uid-b1", {"reclaim": {"at": STAMP, "reason": "Test", "message": "evicted for alpha"}})
    ]
    assert api.events == [("ns/b1", "TestEvicted", "evicted for alpha")]
    assert tally.heard == [("evicted", "b1")]


def test_a_refused_eviction_is_written_into_the_notice_once() -> None:
    notice = new_notice(NOW - 30, 30, "alpha", "ns/a1")
    api = cluster("b1", notice=notice)
    api.refuse_eviction["ns/b1"] = "PDB says no"
    pod = api.pods["ns/b1"]
    tally = Tally()
    eviction = EvictPod(read_pod(pod), notice, "evicted for alpha")
    assert not run(evict(cast(ClusterApi, api), KIND, _ref(pod), eviction, NOW, tally))
    written = annotation(api, "b1")
    assert written is not None and written["blocked"] == "PDB says no"
    [(_, reason, message)] = api.events
    assert reason == "EvictionBlocked" and message.startswith("a test for alpha: the Eviction")
    assert tally.heard == [("blocked", "b1")]
    # the next round reads the notice with `blocked`: the same refusal is not said again
    again = read_pod(api.pods["ns/b1"])
    assert again.reclaim_notice is not None and again.reclaim_notice.blocked == "PDB says no"
    retry = EvictPod(again, again.reclaim_notice, "evicted for alpha")
    assert not run(evict(cast(ClusterApi, api), KIND, _ref(api.pods["ns/b1"]), retry, NOW, tally))
    assert len(api.events) == 1 and len(api.written("patch_pod")) == 1
    assert tally.heard == [("blocked", "b1")]
    assert api.written("patch_lease_status") == []


def test_a_lease_mark_that_fails_is_logged_and_the_eviction_stands() -> None:
    notice = new_notice(NOW - 30, 30, "alpha", "ns/a1")
    api = cluster("b1", notice=notice)
    api.fail_next("patch_lease_status")
    pod = api.pods["ns/b1"]
    eviction = EvictPod(read_pod(pod), notice, "evicted for alpha")
    assert run(evict(cast(ClusterApi, api), KIND, _ref(pod), eviction, NOW))
    assert api.events == [("ns/b1", "TestEvicted", "evicted for alpha")]


def test_losing_the_leadership_while_marking_the_lease_stops_the_round() -> None:
    notice = new_notice(NOW - 30, 30, "alpha", "ns/a1")
    api = cluster("b1", notice=notice)
    pod = api.pods["ns/b1"]

    async def not_leader(namespace: str, name: str, mark: EvictionMark) -> bool:
        raise NotLeader("lost the lease")

    api.mark_lease_evicted = not_leader  # type: ignore[method-assign]
    eviction = EvictPod(read_pod(pod), notice, "evicted for alpha")
    with pytest.raises(NotLeader):
        run(evict(cast(ClusterApi, api), KIND, _ref(pod), eviction, NOW))


def test_a_withdrawal_removes_the_annotation_with_an_event() -> None:
    api = cluster("b1", notice=new_notice(NOW, 30, "alpha", "ns/a1"))
    pod = api.pods["ns/b1"]
    tally = Tally()
    item = WithdrawNotice(read_pod(pod), "not needed")
    assert run(withdraw(cast(ClusterApi, api), KIND, _ref(pod), item, STAMP, tally))
    assert annotation(api, "b1") is None
    assert api.events == [("ns/b1", "TestWithdrawn", "not needed")]
    assert tally.heard == [("withdrawn", "b1")]


def test_a_round_writes_in_order_and_one_failing_pod_fails_only_itself() -> None:
    due = new_notice(NOW - 30, 30, "alpha", "ns/a1")
    api = cluster("b1", "b2", "b3", notice=due)
    refs = {k: reference_of("Pod", p) for k, p in api.pods.items()}
    views = {k: read_pod(p) for k, p in api.pods.items()}
    api.fail_next("patch_pod")  # b1's notice fails
    outcomes = Outcomes()
    contain = Containment("test", cast(ClusterApi, api))
    run(
        write_notices(
            cast(ClusterApi, api),
            KIND,
            refs,
            NOW,
            notices=[NoticePod(views["ns/b1"], new_notice(NOW, 30, "alpha", "ns/a1"), "go")],
            evictions=[EvictPod(views["ns/b2"], due, "gone")],
            withdrawals=[WithdrawNotice(views["ns/b3"], "stays")],
            tally=OutcomeTally(outcomes, lambda notice: f"For{notice.claimant}"),
            contain=contain,
        )
    )
    assert [reason for _, reason, _ in api.events] == ["TestEvicted", "TestWithdrawn"]
    assert outcomes.heard == [("evicted", "Foralpha")]  # a withdrawal is no outcome
    kept = annotation(api, "b1")  # its new notice failed: set aside, the round went on
    assert kept is not None and kept["evictAt"] == format_time(NOW)
    assert not contain.attempt(ObjectRef("test", "Pod", "ns/b1"), NOW)  # its backoff runs
    assert contain.attempt(ObjectRef("test", "Pod", "ns/b3"), NOW)
