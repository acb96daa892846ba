"""The watch cache's store of one kind: events folded in, a relist that says what changed while no
watch ran, an object outside the selector treated as gone."""

from __future__ import annotations

from typing import Any

from gpupool.state.objects import Change, Event, ObjectStore, key_of


def obj(name: str, rv: str, ns: str | None = "t", **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "resourceVersion": rv}
    if ns:
        meta["namespace"] = ns
    return {"metadata": meta, **extra}


def test_keys_are_namespace_and_name_or_name_alone() -> None:
    assert key_of(obj("a", "1")) == "t/a"
    assert key_of(obj("n1", "1", ns=None)) == "n1"


def test_events_add_change_and_delete_and_a_repeat_changes_nothing() -> None:
    store = ObjectStore("pods")
    added = store.apply(Event.ADDED, obj("a", "1"))
    assert added == Change("pods", "t/a", None, obj("a", "1"))
    assert store.apply(Event.MODIFIED, obj("a", "1")) is None  # the same version again
    assert store.generation == 1
    changed = store.apply(Event.MODIFIED, obj("a", "2", spec={"x": 1}))
    assert changed is not None and changed.old == obj("a", "1")
    assert store.get("t/a") == obj("a", "2", spec={"x": 1})
    gone = store.apply(Event.DELETED, obj("a", "3"))
    assert gone is not None and gone.new is None and len(store) == 0
    assert store.apply(Event.DELETED, obj("a", "3")) is None
    assert store.generation == 3


def test_a_relist_reports_what_was_added_changed_and_deleted_while_no_watch_ran() -> None:
    store = ObjectStore("gpuleases")
    store.replace([obj("kept", "1"), obj("changed", "1"), obj("deleted", "1")])
    assert store.synced
    changes = store.replace([obj("kept", "1"), obj("changed", "5"), obj("new", "6")])
    seen = {(c.key, c.old is None, c.new is None) for c in changes}
    assert seen == {("t/changed", False, False), ("t/new", True, False), ("t/deleted", False, True)}
    assert sorted(key_of(o) for o in store.values()) == ["t/changed", "t/kept", "t/new"]


def test_an_object_that_leaves_the_selector_is_gone_from_the_store() -> None:
    store = ObjectStore("pods", keep=lambda o: "tenant" in (o.get("metadata") or {}))
    tagged = obj("a", "1")
    tagged["metadata"]["tenant"] = "x"
    assert store.apply(Event.ADDED, tagged) is not None
    left = store.apply(Event.MODIFIED, obj("a", "2"))  # its label removed
    assert left is not None and left.new is None and store.get("t/a") is None


def test_changes_since_names_the_keys_changed_after_a_generation() -> None:
    store = ObjectStore("pods")
    store.replace([obj("a", "1"), obj("b", "1")])
    start = store.generation
    assert store.changes_since(start) == set()
    store.apply(Event.MODIFIED, obj("a", "2"))
    middle = store.generation
    store.apply(Event.ADDED, obj("c", "3"))
    store.apply(Event.DELETED, obj("b", "4"))
    store.apply(Event.MODIFIED, obj("a", "2"))  # the same version again: no change
    assert store.changes_since(start) == {"t/a", "t/c", "t/b"}
    assert store.changes_since(middle) == {"t/c", "t/b"}
    assert store.changes_since(store.generation) == set()
    assert store.changes_since(store.generation + 1) is None  # a generation it never had


def test_changes_since_cannot_answer_across_a_relist_or_past_what_it_keeps(
    monkeypatch: Any,
) -> None:
    store = ObjectStore("pods")
    store.replace([obj("a", "1")])
    before = store.generation
    store.replace([obj("a", "2")])  # many changes in one generation: the reader starts afresh
    assert store.changes_since(before) is None
    assert store.changes_since(store.generation) == set()
    monkeypatch.setattr("gpupool.state.objects.CHANGE_LOG", 3)
    kept_from = store.generation
    for rv in range(3, 7):  # four changes, three kept
        store.apply(Event.MODIFIED, obj("a", str(rv)))
    assert store.changes_since(kept_from) is None
    assert store.changes_since(kept_from + 1) == {"t/a"}
