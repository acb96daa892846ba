"""Blast radius of one, decided: the per-object backoff (base, doubling, cap, reset on success),
the book of set-aside objects (due, retry, news only when the error changes, forgetting the
deleted) and `plan_isolated` (the items that make a plan raise are left out)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gpupool.controllers.isolation import Backoff, ObjectRef, SetAside, error_text, plan_isolated

REF = ObjectRef("read", "Pod", "ns/p")


def test_backoff_starts_at_its_base_doubles_and_stops_at_its_cap() -> None:
    b = Backoff(base_s=2.0, cap_s=30.0)
    assert [b.delay(n) for n in range(7)] == [0.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert b.delay(10_000) == 30.0  # no overflow however long it fails


def test_backoff_refuses_a_base_above_its_cap_or_not_positive() -> None:
    with pytest.raises(ValueError, match="base"):
        Backoff(base_s=10.0, cap_s=5.0)
    with pytest.raises(ValueError, match="base"):
        Backoff(base_s=0.0)


def test_a_failed_object_waits_its_backoff_then_is_due_again_and_a_success_resets_it() -> None:
    book = SetAside(Backoff(base_s=1.0, cap_s=8.0))
    assert book.due(REF, 0.0) and not book.retrying(REF, 0.0)
    first = book.failed(REF, "boom", 100.0)
    assert (first.failures, first.retry_at, first.new) == (1, 101.0, True)
    assert not book.due(REF, 100.5) and book.due(REF, 101.0) and book.retrying(REF, 101.0)
    second = book.failed(REF, "boom", 101.0)
    assert (second.failures, second.retry_at, second.new) == (2, 103.0, False)  # same error
    third = book.failed(REF, "other", 103.0)
    assert third.new and third.retry_at == 107.0  # a new error is news again
    assert len(book) == 1 and book.succeeded(REF) and len(book) == 0
    again = book.failed(REF, "other", 200.0)
    assert again.failures == 1 and again.retry_at == 201.0 and again.new  # reset


def test_objects_no_longer_listed_are_forgotten_only_for_their_step_and_kind() -> None:
    book = SetAside()
    gone, kept, lease = REF, ObjectRef("read", "Pod", "ns/q"), ObjectRef("read", "GpuLease", "x")
    for ref in (gone, kept, lease):
        book.failed(ref, "boom", 0.0)
    book.keep_only("read", "Pod", ["ns/q"])
    assert set(book.refs()) == {kept, lease}


def test_error_text_is_one_bounded_line_with_the_type() -> None:
    text = error_text(OverflowError("a\nb " + "x" * 1000))
    assert text.startswith("OverflowError: a b x") and "\n" not in text and len(text) <= 300


def _sum_of_inverses(items: Sequence[int]) -> float:
    return sum(1 / i for i in items)  # 0 raises ZeroDivisionError


def test_plan_isolated_leaves_out_the_items_that_make_the_plan_raise() -> None:
    plan, bad = plan_isolated([1, 0, 2, 4], _sum_of_inverses)
    assert plan == 1.75
    assert [(item, type(err)) for item, err in bad] == [(0, ZeroDivisionError)]
    assert plan_isolated([1, 2], _sum_of_inverses) == (1.5, ())


def test_plan_isolated_raises_when_the_failure_is_in_no_single_item() -> None:
    def broken(items: Sequence[int]) -> int:
        raise RuntimeError("the plan itself")

    with pytest.raises(RuntimeError, match="the plan itself"):
        plan_isolated([1, 2, 3], broken)


def test_the_next_retry_is_the_soonest_after_the_round_not_one_it_left_untried() -> None:
    book = SetAside(Backoff(base_s=1.0))
    book.failed(ObjectRef("read", "Pod", "ns/a"), "boom", 100.0)  # due again at 101
    book.failed(ObjectRef("read", "Pod", "ns/b"), "boom", 104.0)  # due again at 105
    assert book.next_retry(after=100.0) == 101.0
    assert book.next_retry(after=102.0) == 105.0  # a was due and not tried: no deadline
    assert book.next_retry(after=106.0) is None
