"""The controller's work queue: a change owes a round only to the loops that wake on its kind, a
loop's period owes it one, several changes fold into one round, and the wait is measured from
the first."""

from __future__ import annotations

from gpupool.controllers.work_queue import EVERYTHING, LoopQueue, LoopSpec, Owed

SPECS = (
    LoopSpec("node-health", frozenset({"gpunodes"}), 10.0),
    LoopSpec("admission", frozenset({"pods", "gpuquotas"}), 60.0),
)


def _after_first_rounds() -> LoopQueue:
    queue = LoopQueue(SPECS, now=0.0)
    assert queue.due(0.0) == ["node-health", "admission"]  # everything is owed at start
    for name in queue.due(0.0):
        queue.start(name, 0.0)
    assert queue.depth() == 0
    return queue


def test_a_change_owes_a_round_only_to_the_loops_that_wake_on_its_kind() -> None:
    queue = _after_first_rounds()
    assert queue.due(1.0) == []
    assert queue.mark("pods", "t/p1", 1.0)
    assert not queue.mark("deployments", "t/d", 1.0)  # nobody wakes on it
    assert queue.due(1.5) == ["admission"] and queue.depth() == 1
    assert queue.wait_s(1.5) == 0.0


def test_changes_before_a_round_fold_into_it_and_its_wait_counts_from_the_first() -> None:
    queue = _after_first_rounds()
    queue.mark("pods", "t/p1", 2.0)
    queue.mark("pods", "t/p2", 3.0)
    queue.mark("gpuquotas", "q", 4.0)
    waited, keys = queue.start("admission", 5.0)
    assert (waited, keys) == (3.0, 3)
    assert queue.due(5.0) == [] and queue.depth() == 0


def test_a_period_owes_a_round_and_the_queue_says_when_the_next_comes_due() -> None:
    queue = _after_first_rounds()
    assert queue.wait_s(4.0) == 6.0  # node-health's period of 10 s, from its round at 0
    assert queue.due(10.0) == ["node-health"]
    queue.start("node-health", 10.0)
    assert queue.wait_s(10.0) == 10.0
    assert queue.due(60.0) == ["node-health", "admission"]


def test_mark_all_owes_every_loop_a_round() -> None:
    queue = _after_first_rounds()
    queue.mark_all(7.0)
    assert queue.due(7.0) == ["node-health", "admission"] and queue.depth() == 2


def test_a_deadline_owes_a_round_before_the_period_and_the_wait_counts_to_it() -> None:
    queue = _after_first_rounds()
    queue.schedule("admission", 12.0)  # its timed work (an expiry, say) at 12 s, period 60 s
    assert queue.wait_s(4.0) == 6.0  # node-health's period still comes first
    queue.start("node-health", 10.0)
    assert queue.wait_s(10.0) == 2.0 and queue.due(11.9) == []
    assert queue.due(12.0) == ["admission"]


def test_a_round_clears_its_deadline_and_none_leaves_only_the_period() -> None:
    queue = _after_first_rounds()
    queue.schedule("admission", 12.0)
    queue.mark("pods", "t/p1", 5.0)  # a change comes first: the round runs then
    queue.start("admission", 5.0)
    assert queue.due(12.0) == ["node-health"]  # the deadline went with the round
    queue.schedule("admission", None)
    queue.start("node-health", 12.0)
    assert queue.wait_s(12.0) == 10.0  # node-health's period; admission's is 60 s from 5


def test_a_deadline_past_its_period_changes_nothing() -> None:
    queue = _after_first_rounds()
    queue.schedule("node-health", 500.0)
    assert queue.due(10.0) == ["node-health"]  # the period (the safety net) stands


def test_a_loop_with_a_gap_runs_at_most_that_often_and_folds_the_changes_between() -> None:
    specs = (LoopSpec("metrics", frozenset({"pods"}), 300.0, min_gap_s=5.0),)
    queue = LoopQueue(specs, now=0.0)
    assert queue.due(0.0) == ["metrics"]  # its first round is not held
    queue.start("metrics", 0.0)
    queue.mark("pods", "t/p1", 1.0)
    queue.mark("pods", "t/p2", 2.0)
    assert queue.due(2.0) == [] and queue.depth() == 1  # owed, held back by its gap
    assert queue.wait_s(2.0) == 3.0  # the manager sleeps until the gap ends, not the period
    assert queue.due(5.0) == ["metrics"]
    assert queue.start("metrics", 5.0) == (4.0, 2)  # both changes in one round
    assert queue.due(6.0) == [] and queue.wait_s(6.0) == 299.0  # nothing owed: its period


def test_a_gap_holds_back_only_its_own_loop() -> None:
    specs = (
        LoopSpec("admission", frozenset({"pods"}), 300.0),
        LoopSpec("metrics", frozenset({"pods"}), 300.0, min_gap_s=5.0),
    )
    queue = LoopQueue(specs, now=0.0)
    for name in queue.due(0.0):
        queue.start(name, 0.0)
    queue.mark("pods", "t/p1", 1.0)
    assert queue.due(1.0) == ["admission"] and queue.wait_s(1.0) == 0.0
    queue.start("admission", 1.0)
    assert queue.due(1.0) == [] and queue.wait_s(1.0) == 4.0


def test_a_round_is_owed_the_changes_since_the_last_or_everything() -> None:
    queue = LoopQueue(SPECS, now=0.0)
    assert queue.owed("node-health", 0.0) == EVERYTHING  # the first round
    queue = _after_first_rounds()
    queue.mark("gpunodes", "n1", 1.0)
    queue.mark("gpunodes", "n2", 1.5)
    assert queue.owed("node-health", 2.0) == Owed(
        frozenset({("gpunodes", "n1"), ("gpunodes", "n2")}), everything=False
    )
    queue.start("node-health", 2.0)
    assert queue.owed("node-health", 3.0) == Owed(frozenset(), everything=False)  # a deadline
    assert queue.owed("node-health", 12.0) == EVERYTHING  # its period: the safety net
    queue.mark_all(4.0)
    assert queue.owed("node-health", 4.0) == EVERYTHING  # a wake (a new leader)
    queue.start("node-health", 4.0)
    assert not queue.owed("node-health", 5.0).everything
