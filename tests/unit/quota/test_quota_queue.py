from __future__ import annotations

from collections.abc import Callable

from gpupool.quota.admission import WaitReason
from gpupool.quota.queue import AdmissionQueue, FifoMode, Outcome, QueueEntry


def entries() -> list[QueueEntry]:
    return [
        QueueEntry("big", "a", priority=0, submitted_at=1.0, amount=100),
        QueueEntry("small1", "a", priority=0, submitted_at=2.0, amount=1),
        QueueEntry("urgent", "a", priority=9, submitted_at=3.0, amount=1),
        QueueEntry("small2", "a", priority=0, submitted_at=4.0, amount=1),
        QueueEntry("other", "b", priority=0, submitted_at=0.5, amount=1),
    ]


def fits_under(capacity: int) -> Callable[[QueueEntry], Outcome]:
    def attempt(entry: QueueEntry) -> Outcome:
        if entry.amount <= capacity:
            return Outcome(True)
        return Outcome(False, WaitReason.NO_FIT, f"{entry.amount} > {capacity}")

    return attempt


def test_order_is_priority_then_submit_time_with_positions() -> None:
    queue = AdmissionQueue()
    for e in entries():
        queue.push(e)
    assert [e.id for e in queue.entries("a")] == ["urgent", "big", "small1", "small2"]
    assert queue.position("urgent") == 1
    assert queue.position("small2") == 4
    queue.remove("big")
    assert queue.position("small2") == 3


def test_best_effort_lets_small_pods_pass_a_head_that_cannot_fit() -> None:
    queue = AdmissionQueue(FifoMode.BEST_EFFORT)
    for e in entries():
        queue.push(e)
    admitted = queue.drain(fits_under(10))
    assert sorted(e.id for e in admitted) == ["other", "small1", "small2", "urgent"]
    status = queue.status("big")
    assert (status.position, status.reason) == (1, WaitReason.NO_FIT)


def test_strict_fifo_holds_back_everything_behind_the_head() -> None:
    queue = AdmissionQueue(FifoMode.STRICT)
    for e in entries():
        queue.push(e)
    admitted = queue.drain(fits_under(10))
    assert sorted(e.id for e in admitted) == ["other", "urgent"]
    assert queue.status("big").reason is WaitReason.NO_FIT
    behind = queue.status("small2")
    assert behind.reason is WaitReason.QUEUE_ORDER
    assert "behind big" in behind.detail
    assert behind.position == 3


def test_tenant_priority_orders_the_drain_and_stop_ends_it() -> None:
    queue = AdmissionQueue(tenant_priority={"b": 5})
    for e in entries():
        queue.push(e)
    seen: list[str] = []

    def attempt(entry: QueueEntry) -> Outcome:
        seen.append(entry.id)
        return Outcome(False, WaitReason.NO_FIT, stop=True)

    assert queue.drain(attempt) == []
    assert seen == ["other"]
    assert len(queue) == 5
