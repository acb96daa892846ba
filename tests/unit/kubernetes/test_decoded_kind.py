"""A kind's objects decoded beside the watch cache's store (`DecodedKind`): brought up to date
with only the objects the store changed, in the store's order, the same values for the objects
that did not change, and the whole kind decoded afresh when the store cannot say what changed."""

from __future__ import annotations

from typing import Any

from gpupool.adapters.kubernetes.decoded import pods_listed, quotas_listed
from gpupool.adapters.kubernetes.decoded_kind import DecodedKind
from gpupool.state.listed import Listed
from gpupool.state.objects import Event, ObjectStore
from gpupool.state.pods import PodView


def pod(name: str, rv: str, *, bad: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": rv,
        "labels": {"gpupool.io/tenant": "alpha"},
        "annotations": ["not", "a", "map"] if bad else {},
    }  # fmt: skip
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Pending"}}  # fmt: skip


def names(listed: Listed[PodView]) -> list[str]:
    return [v.name for v, _ in listed.read]


def test_only_the_changed_objects_are_decoded_again_and_the_store_order_is_kept() -> None:
    store = ObjectStore("Pod")
    store.replace([pod("a", "1"), pod("b", "1"), pod("c", "1")])
    decoded: list[str] = []

    def counting(objs: Any) -> Listed[PodView]:
        objs = list(objs)
        decoded.extend(o["metadata"]["name"] for o in objs)
        return pods_listed(objs)

    kind = DecodedKind(counting)
    first = kind.listed(store)
    assert names(first) == ["a", "b", "c"] and decoded == ["a", "b", "c"]
    assert kind.listed(store) is first  # nothing changed: the same Listed
    decoded.clear()
    store.apply(Event.MODIFIED, pod("b", "2"))
    store.apply(Event.ADDED, pod("d", "3"))
    store.apply(Event.DELETED, pod("a", "4"))
    second = kind.listed(store)
    assert sorted(decoded) == ["b", "d"]
    assert names(second) == ["b", "c", "d"] == [o["metadata"]["name"] for o in store.values()]
    assert second.read[1] is first.read[2]  # c did not change: the very same value
    assert [r.resource_version for _, r in second.read] == ["2", "1", "3"]


def test_an_object_that_stops_decoding_moves_to_unreadable_and_back() -> None:
    store = ObjectStore("Pod")
    store.replace([pod("a", "1"), pod("b", "1")])
    kind = DecodedKind(pods_listed)
    kind.listed(store)
    store.apply(Event.MODIFIED, pod("a", "2", bad=True))
    broken = kind.listed(store)
    assert names(broken) == ["b"] and [u.ref.key for u in broken.unreadable] == ["ns/a"]
    store.apply(Event.MODIFIED, pod("a", "3"))
    mended = kind.listed(store)
    assert names(mended) == ["a", "b"] and not mended.unreadable


def test_a_relist_in_between_decodes_the_kind_afresh() -> None:
    store = ObjectStore("Pod")
    store.replace([pod("a", "1"), pod("b", "1")])
    kind = DecodedKind(pods_listed)
    kind.listed(store)
    store.replace([pod("b", "1"), pod("c", "2")])  # what changed is not told one by one
    assert names(kind.listed(store)) == ["b", "c"]


def test_the_stored_status_of_a_changed_object_is_kept_by_its_key() -> None:
    store = ObjectStore("GpuQuota")
    quota: dict[str, Any] = {
        "apiVersion": "gpupool.io/v1alpha1", "kind": "GpuQuota",
        "metadata": {"name": "alpha", "uid": "u-alpha", "resourceVersion": "1", "generation": 1},
        "spec": {"nominal": "8Gi"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }  # fmt: skip
    store.replace([quota])
    kind = DecodedKind(quotas_listed)
    ready = kind.listed(store).status_of("alpha").condition("Ready")
    assert ready is not None and ready.status == "True"
    later = {"conditions": [{"type": "Ready", "status": "False"}]}
    store.apply(Event.MODIFIED, {**quota, "metadata": {**quota["metadata"], "resourceVersion": "2"},
                                 "status": later})  # fmt: skip
    ready = kind.listed(store).status_of("alpha").condition("Ready")
    assert ready is not None and ready.status == "False"
    store.apply(Event.DELETED, quota)
    assert kind.listed(store).stored == {}
