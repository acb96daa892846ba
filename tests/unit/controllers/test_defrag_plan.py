"""The defragmentation loop's pure round plan, by properties over random pools (hypothesis):
the pods it notices are the planner's moves and nothing else, never an exclusive pod, never an
orphan unless the pool allows it, never more than a PodDisruptionBudget allows; every marked card
is one the planner clears, in the pool's scope, and all its slices are noticed; no move raises a
card above the threshold; bad settings and pools without defragmentation move nothing; a round
starts only when the pool has no mark standing and its interval has passed."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.adapters.kubernetes.lease import lease_from_json
from gpupool.adapters.kubernetes.node import read_gpu_node, read_node
from gpupool.adapters.kubernetes.pdb import read_budget
from gpupool.adapters.kubernetes.pod_view import read_pod
from gpupool.adapters.kubernetes.pool import read_pool
from gpupool.adapters.wire.times import format_time
from gpupool.controllers.defrag.plan import DefragRound, plan_defrag_round
from gpupool.controllers.reclaim.room import build_placement
from gpupool.state.nodes import DefragMark
from gpupool.state.notice import ReclaimNotice

GiB = 2**30
T0 = 1_800_000_000.0
CARD_GIB = 72


def _node(name: str, pool_label: bool) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name, **({"pool": "a"} if pool_label else {})}
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def _gpunode(name: str, cards: int) -> dict[str, Any]:
    devices = [
        {
            "index": i,
            "model": "A100-80GB",
            "uuid": f"GPU-{name}-{i}",
            "memoryBytes": 80 * GiB,
            "allocatableBytes": CARD_GIB * GiB,
        }
        for i in range(cards)
    ]
    return {
        "metadata": {"name": name},
        "status": {"health": "Healthy", "devices": devices},
    }


def _pod(
    name: str,
    gib: int,
    node: str | None,
    priority: int,
    *,
    owner: bool,
    exclusive: bool,
    app: str,
    waiting: bool = False,
) -> dict[str, Any]:
    annotations = {
        "gpupool.io/admitted": f'{{"at":"{format_time(T0 - 100)}","borrowed":0,'
        f'"preemptible":false}}'
    }
    if exclusive:
        annotations["gpupool.io/exclusive"] = "true"
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "uid": f"uid-{name}",
        "labels": {"gpupool.io/tenant": "t", "app": app},
        "annotations": annotations,
        "creationTimestamp": format_time(T0 - 100),
    }
    if owner:
        meta["ownerReferences"] = [
            {"kind": "ReplicaSet", "name": app, "uid": app, "controller": True}
        ]
    spec: dict[str, Any] = {
        "priority": priority,
        "containers": [
            {"name": "m", "resources": {"limits": {"gpupool.io/gpu-memory": f"{gib}Gi"}}}
        ],
    }
    status: dict[str, Any] = {"phase": "Running" if node else "Pending"}
    if node:
        spec["nodeName"] = node
    if waiting:
        status["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        ]
    return {"metadata": meta, "spec": spec, "status": status}


def _lease(pod: dict[str, Any], card: int, offset: int, gib: int) -> dict[str, Any]:
    meta, node = pod["metadata"], pod["spec"]["nodeName"]
    return {
        "metadata": {"name": meta["uid"], "namespace": "ns"},
        "spec": {
            "tenant": "t",
            "podRef": {"namespace": "ns", "name": meta["name"], "uid": meta["uid"]},
            "node": node,
            "devices": [
                {
                    "index": card,
                    "uuid": f"GPU-{node}-{card}",
                    "model": "A100-80GB",
                    "offsetBytes": offset * GiB,
                    "sizeBytes": gib * GiB,
                }
            ],
            "amount": gib * GiB,
            "borrowed": 0,
        },
        "status": {"phase": "Active", "start": format_time(T0 - 100)},
    }


slice_ = st.tuples(
    st.sampled_from([4, 8, 16, 24]),  # GiB
    st.integers(0, 3),  # priority
    st.booleans(),  # owner
    st.integers(0, 9),  # exclusive when 0
    st.sampled_from(["a", "b", "c"]),  # app (budgets select by it)
)
cluster = st.lists(
    st.lists(st.lists(slice_, max_size=4), min_size=1, max_size=2), min_size=2, max_size=4
)


def _build(
    layout: list[list[list[Any]]],
    budget_allowed: dict[str, int],
    threshold: int,
    orphans: bool,
    max_moves: int | None,
) -> Any:
    nodes, gpunodes, pods, leases = [], [], [], []
    for n, cards in enumerate(layout):
        name = f"n{n}"
        nodes.append(_node(name, pool_label=n != len(layout) - 1 or n < 2))
        gpunodes.append(_gpunode(name, len(cards)))
        for c, slices in enumerate(cards):
            offset = 0
            for k, (gib, prio, owner, excl, app) in enumerate(slices):
                if offset + gib > CARD_GIB:
                    break
                pod = _pod(
                    f"p{n}-{c}-{k}", gib, name, prio, owner=owner, exclusive=excl == 0, app=app
                )
                pods.append(pod)
                leases.append(_lease(pod, c, offset, gib))
                offset += gib
    pods.append(_pod("large", 64, None, 0, owner=True, exclusive=False, app="z", waiting=True))
    budgets = [
        read_budget(
            {
                "metadata": {"name": app, "namespace": "ns"},
                "spec": {"selector": {"matchLabels": {"app": app}}},
                "status": {"disruptionsAllowed": allowed},
            }
        )
        for app, allowed in budget_allowed.items()
    ]
    defrag: dict[str, Any] = {"enabled": True, "moveOrphans": orphans}
    if max_moves is not None:
        defrag["maxMoves"] = max_moves
    pool = read_pool(
        {
            "metadata": {"name": "a", "generation": 1},
            "spec": {
                "nodeSelector": {"pool": "a"},
                "defragThresholdPercent": threshold,
                "defrag": defrag,
            },
        }
    )
    views = [read_pod(p) for p in pods]
    records = [lease_from_json(le) for le in leases]
    placement = build_placement(
        [read_node(n) for n in nodes],
        [read_gpu_node(g) for g in gpunodes],
        records,
        {v.uid for v in views if v.holds_quota},
    )
    return pool, placement, views, budgets


@settings(max_examples=60, deadline=None)
@given(
    layout=cluster,
    allowed=st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 2)),
    threshold=st.integers(0, 30),
    orphans=st.booleans(),
    max_moves=st.none() | st.integers(1, 4),
)
def test_a_round_notices_exactly_the_planners_moves_within_the_rules(
    layout: Any, allowed: dict[str, int], threshold: int, orphans: bool, max_moves: int | None
) -> None:
    pool, placement, views, budgets = _build(layout, allowed, threshold, orphans, max_moves)
    before = placement.snap.state_key()
    plan: DefragRound = plan_defrag_round([pool], placement, views, budgets, {}, T0)
    assert placement.snap.state_key() == before  # every what-if undone
    assert len(plan.rounds) == 1
    moves = plan.rounds[0].plan.moves
    by_key = {v.key: v for v in views}
    noticed = [n.pod.key for n in plan.notices]
    assert sorted(noticed) == sorted(m.resident for m in moves)
    if max_moves is not None:
        assert len(noticed) <= max_moves
    used: dict[str, int] = {}
    for key in noticed:
        pod = by_key[key]
        assert pod.request is not None and not pod.request.exclusive
        assert pod.has_owner or orphans
        app = pod.labels["app"]
        if app in allowed:
            used[app] = used.get(app, 0) + 1
    for app, count in used.items():
        assert count <= allowed[app]
    marked = {(m.node, g) for m in plan.marks for g in m.mark.gpus}
    assert marked == set(plan.rounds[0].plan.cleared)  # one GPU per slot here: index == slot
    for node, _ in marked:
        assert placement.nodes[node].labels.get("pool") == "a"  # only the pool's cards
    for n in plan.notices:
        assert n.notice.room is not None and any(node == n.notice.room for node, _ in marked)
        assert n.notice.evict_at == T0 + 60  # the default buffer time
    # every noticed pod leaves a marked card (a card is fixed with the fewest moves, so others
    # may stay on it)
    for key in noticed:
        assert _on(placement, by_key[key].uid, marked)
    threshold_f = threshold / 100
    rnd = plan.rounds[0].plan
    for card, after in rnd.card_after.items():
        assert after <= max(threshold_f, rnd.card_before[card]) + 1e-9 or card in rnd.cleared


def _on(placement: Any, uid: str, marked: set[tuple[str, int]]) -> bool:
    d = placement.decisions.get(uid)
    return d is not None and any((d.node, slot) in marked for slot in d.cards)


@settings(max_examples=20, deadline=None)
@given(layout=cluster, threshold=st.integers(0, 30))
def test_a_pool_without_usable_settings_moves_nothing(layout: Any, threshold: int) -> None:
    pool, placement, views, budgets = _build(layout, {}, threshold, False, None)
    bad = read_pool(
        {
            "metadata": {"name": "a"},
            "spec": {
                "defragThresholdPercent": threshold,
                "defrag": {"enabled": True, "noticeSeconds": 60, "timeoutSeconds": 30},
            },
        }
    )
    off = read_pool({"metadata": {"name": "a"}, "spec": {"defrag": {"enabled": False}}})
    for p in (bad, off):
        plan = plan_defrag_round([p], placement, views, budgets, {}, T0)
        assert not plan.rounds and not plan.marks and not plan.notices and not plan.evictions
        assert [c.ok for c in plan.conditions] == [False]
    assert pool.defrag is not None


def test_no_new_round_while_a_mark_stands_or_inside_the_interval() -> None:
    layout = [[[(16, 0, True, 5, "c"), (16, 0, True, 5, "c")]], [[(8, 1, True, 5, "c")]]]
    pool, placement, views, budgets = _build(layout, {}, 5, False, None)
    standing = {"n0": DefragMark("a", T0 - 10, T0 + 600, (0,))}
    moving = ReclaimNotice(T0 - 10, T0 + 20, "a", "", room="n0")
    noticed = [replace(v, defrag_notice=moving) if v.node == "n0" else v for v in views]
    assert not plan_defrag_round([pool], placement, noticed, budgets, standing, T0).rounds
    assert not plan_defrag_round([pool], placement, noticed, budgets, standing, T0).releases
    recent = read_pool(
        {
            "metadata": {"name": "a"},
            "spec": {
                "nodeSelector": {"pool": "a"},
                "defragThresholdPercent": 5,
                "defrag": {"enabled": True, "intervalSeconds": 300},
            },
            "status": {"defrag": {"lastRound": format_time(T0 - 100)}},
        }
    )
    assert not plan_defrag_round([recent], placement, views, budgets, {}, T0).rounds
    assert plan_defrag_round([recent], placement, views, budgets, {}, T0 + 201).rounds


def test_a_mark_is_released_when_its_cards_are_empty_or_the_round_times_out() -> None:
    layout = [[[(16, 0, True, 5, "c")]], [[]]]
    pool, placement, views, budgets = _build(layout, {}, 5, False, None)
    empty = {"n1": DefragMark("a", T0 - 10, T0 + 600, (0,))}
    plan = plan_defrag_round([pool], placement, views, budgets, empty, T0)
    assert [(r.node, r.kind) for r in plan.releases] == [("n1", "cleared")]
    late = {"n0": DefragMark("a", T0 - 700, T0 - 100, (0,))}
    plan = plan_defrag_round([pool], placement, views, budgets, late, T0)
    assert [(r.node, r.kind) for r in plan.releases] == [("n0", "timeout")]
