"""The borrowed marks kept between admission rounds: the same view and lease give the very same
marked view, a lease or pod that changed gives a new one, and every call marks as
`mark_borrowed` does."""

from __future__ import annotations

from dataclasses import replace

from fake_cluster import lease_json, pod_json

from gpupool.adapters.kubernetes.lease import lease_from_json
from gpupool.adapters.kubernetes.pod_view import read_pod
from gpupool.controllers.admission.charge import BorrowedMarks, mark_borrowed
from gpupool.state.lease import LeaseRecord
from gpupool.state.pods import PodView


def _pair(name: str, borrowed_gib: int) -> tuple[PodView, LeaseRecord]:
    pod = pod_json(name, "alpha", 12, node="n1", phase="Running", admitted_at=100.0)
    lease = lease_json(pod, phase="Active", borrowed_gib=borrowed_gib)
    return read_pod(pod), lease_from_json(lease)


def test_the_same_view_and_lease_give_the_same_marked_view_back() -> None:
    (a, la), (b, lb) = _pair("a", 4), _pair("b", 0)
    kept = BorrowedMarks()
    first = mark_borrowed([a, b], [la, lb], kept)
    assert first == mark_borrowed([a, b], [la, lb])
    assert first[0] is not a and first[0].admitted is not None
    assert first[0].admitted.borrowed == 4 * 2**30  # the lease's borrowed mark, copied in
    again = mark_borrowed([a, b], [la, lb], kept)
    assert again[0] is first[0] and again[1] is first[1]  # no new copy


def test_a_changed_lease_or_pod_is_marked_again() -> None:
    a, la = _pair("a", 4)
    kept = BorrowedMarks()
    first = mark_borrowed([a], [la], kept)
    moved = replace(la, borrowed=0)
    after_lease = mark_borrowed([a], [moved], kept)
    assert after_lease == mark_borrowed([a], [moved]) and after_lease[0] is not first[0]
    assert after_lease[0].admitted is not None and after_lease[0].admitted.borrowed == 0
    renamed = replace(a, phase="Running")  # an equal but new view: marked again
    assert mark_borrowed([renamed], [moved], kept)[0] is not after_lease[0]
    assert mark_borrowed([], [moved], kept) == []  # pods gone: forgotten
