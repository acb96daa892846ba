"""Per-object deadlines: one per key, a later one replaces the earlier, the keys whose time came
are handed once, and keys forgotten are never handed."""

from __future__ import annotations

from gpupool.controllers.deadlines import Deadlines


def test_a_rescheduled_key_comes_due_at_its_new_time_only() -> None:
    due: Deadlines[str] = Deadlines()
    due.schedule("a", 10.0)
    due.schedule("b", 20.0)
    due.schedule("a", 30.0)  # a's first entry goes stale
    assert due.first() == 20.0
    assert due.pop_due(25.0) == {"b"}
    assert due.pop_due(25.0) == set() and due.first() == 30.0
    assert due.pop_due(30.0) == {"a"} and due.first() is None and len(due) == 0


def test_dropped_and_forgotten_keys_never_come_due() -> None:
    due: Deadlines[str] = Deadlines()
    for key, at in (("a", 1.0), ("b", 2.0), ("c", 3.0), ("d", 4.0)):
        due.schedule(key, at)
    due.drop("a")
    due.schedule("b", None)
    due.keep(lambda key: key != "c")
    assert "c" not in due and "d" in due
    assert due.first() == 4.0 and due.pop_due(10.0) == {"d"}
