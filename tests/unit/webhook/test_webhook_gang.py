"""Gang marks at the webhook: every kind of bad input gets its own denial, a good member passes
(and keeps its marks), and a member is checked against the gang's existing pods."""

from __future__ import annotations

from typing import Any

import pytest

from gpupool.adapters.webhook.gang import GangMember, read_member
from gpupool.adapters.webhook.mutate import ClusterFacts, mutate_pod
from gpupool.adapters.wire.gangs import read_gang
from gpupool.domain.errors import InvalidGang
from gpupool.domain.gang import MAX_GANG_SIZE, GangMark

STAMP = "2026-01-02T03:04:05.000006Z"
TENANT = {"gpupool.io/tenant": "alpha"}


def member(
    name: str = "w-0",
    gang: str | None = "train",
    size: str | None = "4",
    gpu: bool = True,
    **meta: Any,
) -> dict[str, Any]:
    labels = {} if gang is None else {"gpupool.io/gang": gang}
    annotations = {} if size is None else {"gpupool.io/gang-size": size}
    limits = {"gpupool.io/gpu-memory": "12Gi"} if gpu else {"cpu": "1"}
    return {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "labels": labels,
            "annotations": annotations,
            **meta,
        },
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
    }


def existing(name: str, size: str = "4", tenant: str = "alpha", **status: Any) -> GangMember:
    pod = member(name, size=size)
    pod["metadata"]["labels"]["gpupool.io/tenant"] = tenant
    pod["status"] = status
    return read_member(pod)


def mutate(pod: dict[str, Any], *members: GangMember) -> Any:
    return mutate_pod(pod, TENANT, STAMP, ClusterFacts(gang_members=members))


def test_a_good_member_passes_with_its_marks() -> None:
    mutation = mutate(member("w-3"), existing("w-0"), existing("w-1"), existing("w-2"))
    by_path = {op["path"]: op["value"] for op in mutation.patch}
    assert by_path["/metadata/labels"]["gpupool.io/gang"] == "train"
    assert by_path["/metadata/annotations"]["gpupool.io/gang-size"] == "4"
    assert read_gang(member("w-3")["metadata"]) == GangMark("team-a", "train", 4)


@pytest.mark.parametrize(
    ("size", "says"),
    [
        ("0", "a gang has at least one pod"),
        ("-2", "a gang has at least one pod"),
        ("four", "must be a whole number of pods from 1 to 256; got 'four'"),
        ("2.5", "got '2.5'"),
        ("", "got ''"),
        (str(MAX_GANG_SIZE + 1), f"gangs of at most {MAX_GANG_SIZE} pods"),
    ],
)
def test_a_bad_size_is_denied_with_what_to_write(size: str, says: str) -> None:
    with pytest.raises(InvalidGang, match=r"annotation gpupool.io/gang-size") as err:
        mutate(member(size=size))
    assert says in str(err.value)


def test_half_marked_pods_and_bad_names_are_denied() -> None:
    with pytest.raises(InvalidGang, match=r"needs the annotation gpupool.io/gang-size"):
        mutate(member(size=None))
    with pytest.raises(InvalidGang, match=r"needs the label gpupool.io/gang"):
        mutate(member(gang=None))
    with pytest.raises(InvalidGang, match="never spans namespaces or tenants"):
        mutate(member(gang="team-b/train"))
    with pytest.raises(InvalidGang, match="must be a label value"):
        mutate(member(gang="-train"))
    with pytest.raises(InvalidGang, match="asks for no GPU"):
        mutate(member(gpu=False))


def test_a_member_that_disagrees_on_the_size_is_denied() -> None:
    with pytest.raises(InvalidGang, match="its member 'w-0' says 3"):
        mutate(member("w-1"), existing("w-0", size="3"))


def test_a_member_of_another_tenant_is_denied() -> None:
    with pytest.raises(InvalidGang, match="has members of tenant 'beta'"):
        mutate(member("w-1"), existing("w-0", tenant="beta"))


def test_a_member_beyond_the_size_is_denied_but_a_replacement_may_join() -> None:
    full = [existing(f"w-{i}") for i in range(4)]
    with pytest.raises(InvalidGang, match=r"already has its 4 member\(s\) \(w-0, w-1, w-2, w-3\)"):
        mutate(member("w-4"), *full)
    # w-2 failed and w-3 is being deleted: two replacements may join, one at a time
    ended = [
        existing("w-0"),
        existing("w-1"),
        existing("w-2", phase="Failed"),
        read_member({**member("w-3"), "metadata": {**member("w-3")["metadata"],
                     "deletionTimestamp": STAMP}}),
    ]  # fmt: skip
    assert mutate(member("w-4"), *ended).tenant == "alpha"
    # disagreeing with a member that ended is no disagreement
    assert mutate(member("w-4", size="4"), existing("w-9", size="2", phase="Succeeded")).tenant
