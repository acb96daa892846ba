"""The loops' readers remember by uid and resourceVersion: a new version is decoded again, the same
one is not; an object without both, or one that fails, is decoded every time."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from gpupool.adapters.kubernetes.decoded import by_version, read_pod


def _counting() -> tuple[list[str], Any]:
    calls: list[str] = []

    def read(obj: Mapping[str, Any]) -> tuple[str, ...]:
        calls.append(str(obj["metadata"].get("resourceVersion")))
        if obj.get("bad"):
            raise ValueError("unreadable")
        return (str(obj["metadata"]["name"]),)

    return calls, by_version(read)


def test_the_same_version_is_decoded_once_and_a_new_one_again() -> None:
    calls, read = _counting()
    v1 = {"metadata": {"name": "a", "uid": "u1", "resourceVersion": "1"}}
    assert read(v1) == ("a",) and read(dict(v1)) == ("a",)
    assert calls == ["1"]
    read({"metadata": {"name": "a", "uid": "u1", "resourceVersion": "2"}})
    assert calls == ["1", "2"]


def test_objects_without_a_uid_or_version_and_failures_are_not_remembered() -> None:
    calls, read = _counting()
    loose = {"metadata": {"name": "a"}}
    read(loose)
    read(loose)
    bad = {"metadata": {"name": "b", "uid": "u2", "resourceVersion": "5"}, "bad": True}
    for _ in range(2):
        with pytest.raises(ValueError):
            read(bad)
    assert calls == ["None", "None", "5", "5"]


def test_the_pod_reader_gives_the_same_view_for_the_same_version() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "t", "uid": "u9", "resourceVersion": "3"},
        "spec": {"containers": [{"name": "c"}]},
    }
    assert read_pod(pod) is read_pod(pod)
