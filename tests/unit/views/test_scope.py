"""What one person sees of the views (`state.views.scope`): an operator all of it; a tenant its
namespaces' leases, slices and queue and its own quota, with the other slices kept in place but
nameless; nothing recomputed."""

from __future__ import annotations

from pool_fixture import NOW, big_pool, small_pool

from gpupool.state.views.scope import HIDDEN, Scope, in_namespace, namespaces_of, visible
from gpupool.state.views.status import StatusView, build_status

VIEW = build_status(small_pool(), NOW)


def _slices(view: StatusView) -> list[tuple[str, str, int, int]]:
    return [
        (n.name, s.pod, c.index, s.size_bytes)
        for n in view.pool.nodes
        for c in n.cards
        for s in c.slices
    ]


def test_an_operator_sees_the_view_itself() -> None:
    assert visible(VIEW, Scope.operator("admin")) is VIEW


def test_a_tenant_sees_its_namespaces_and_its_quota_only() -> None:
    scope = Scope(
        "bob", everything=False, namespaces=frozenset({"team-a"}), tenants=frozenset({"team-a"})
    )
    shown = visible(VIEW, scope)
    assert [t.name for t in shown.tenants] == ["team-a"]
    assert shown.tenants[0] == next(t for t in VIEW.tenants if t.name == "team-a")  # the same
    assert {x.lease.partition("/")[0] for x in shown.leases.live} == {"team-a"}
    assert {q.tenant for q in shown.queue} == {"team-a"}
    named = {pod for _, pod, _, _ in _slices(shown) if pod != HIDDEN}
    assert named and all(p.startswith("team-a/") for p in named)
    assert any("showing what bob may read" in n for n in shown.notes)


def test_someone_elses_slice_keeps_its_place_and_size_but_not_its_names() -> None:
    scope = Scope("bob", everything=False, nodes=True, namespaces=frozenset({"team-a"}))
    shown = visible(VIEW, scope)
    before, after = _slices(VIEW), _slices(shown)
    assert [(n, c, size) for n, _, c, size in before] == [(n, c, size) for n, _, c, size in after]
    for (_, pod, _, _), (_, shown_pod, _, _) in zip(before, after, strict=True):
        assert shown_pod == (pod if pod.startswith("team-a/") else HIDDEN)
    for node, shown_node in zip(VIEW.pool.nodes, shown.pool.nodes, strict=True):
        for card, shown_card in zip(node.cards, shown_node.cards, strict=True):
            assert (card.free_bytes, card.fragmentation) == (
                shown_card.free_bytes,
                shown_card.fragmentation,
            )
    assert shown.pool.totals == VIEW.pool.totals  # it may list nodes: the whole pool's totals


def test_without_node_rights_only_the_nodes_holding_its_slices_show() -> None:
    view = build_status(big_pool(60), NOW)
    scope = Scope("t", everything=False, namespaces=frozenset({"tenant-03"}))
    shown = visible(view, scope)
    holding = {
        n.name
        for n in view.pool.nodes
        for c in n.cards
        for s in c.slices
        if s.tenant == "tenant-03"
    }
    assert {n.name for n in shown.pool.nodes} == holding
    assert shown.pool.totals.nodes == len(holding)
    assert shown.pool.totals.used_bytes == sum(n.used_bytes for n in shown.pool.nodes)


def test_one_namespace_and_the_candidates_to_check() -> None:
    assert namespaces_of(VIEW) >= {"team-a", "team-b"}
    one = in_namespace(VIEW, "team-b")
    assert {x.lease.partition("/")[0] for x in one.leases.live} == {"team-b"}
    assert all(q.pod.startswith("team-b/") for q in one.queue)
