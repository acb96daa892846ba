"""What one person may see of a `StatusView`, and the view cut down to it.

The web view reads the cluster once, with its own identity, and shows each person the part their
RBAC lets them read (`Scope`, worked out by SubjectAccessReview at the edge). `visible` only
removes: it never recomputes a figure, so a tenant's numbers are the operator's numbers.

- An operator (`everything`) sees the view as it is.
- Anyone else sees the leases, slices, pods and queue entries of the namespaces they may read,
  and the tenants whose GpuQuota they may read (with those quotas' recorded queues).
- The pool map: who may list Nodes sees every node; others only the nodes holding a slice they
  may see. Either way a slice of someone else's namespace keeps its place and size (the card is
  not free there) but loses its lease, tenant and pod names.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from gpupool.state.views.leases import LeasesView, LeaseView
from gpupool.state.views.pool import NodeView, PoolView, SliceView, pool_totals
from gpupool.state.views.status import StatusView

HIDDEN = ""  # the lease, tenant and pod of a slice the viewer may not see


@dataclass(frozen=True, slots=True)
class Scope:
    user: str
    everything: bool  # may list GpuLeases and pods in every namespace: an operator
    nodes: bool = False  # may list Nodes: the whole pool map
    namespaces: frozenset[str] = frozenset()  # may list GpuLeases there
    tenants: frozenset[str] = frozenset()  # may read that GpuQuota

    @classmethod
    def operator(cls, user: str) -> Scope:
        return cls(user, everything=True, nodes=True)

    def sees_namespace(self, namespace: str) -> bool:
        return self.everything or namespace in self.namespaces

    def sees_key(self, key: str) -> bool:
        """A `namespace/name` key (lease, pod)."""
        return self.sees_namespace(key.partition("/")[0])

    def sees_tenant(self, tenant: str) -> bool:
        return self.everything or tenant in self.tenants


def namespaces_of(view: StatusView) -> frozenset[str]:
    """Every namespace the view names (the candidates to check a person's access to)."""
    keys: list[str] = [x.lease for x in (*view.leases.live, *view.leases.recent)]
    keys += [q.pod for q in view.queue]
    keys += [s.lease for n in view.pool.nodes for c in n.cards for s in c.slices]
    return frozenset(k.partition("/")[0] for k in keys if "/" in k)


def _slice(s: SliceView, scope: Scope) -> SliceView:
    if scope.sees_key(s.lease):
        return s
    return replace(s, lease=HIDDEN, tenant=HIDDEN, pod=HIDDEN, borrowed=False)


def _node(node: NodeView, scope: Scope) -> NodeView:
    cards = tuple(replace(c, slices=tuple(_slice(s, scope) for s in c.slices)) for c in node.cards)
    return replace(node, cards=cards)


def _holds_visible(node: NodeView, scope: Scope) -> bool:
    return any(scope.sees_key(s.lease) for c in node.cards for s in c.slices)


def _pool(pool: PoolView, scope: Scope) -> PoolView:
    nodes = tuple(_node(n, scope) for n in pool.nodes if scope.nodes or _holds_visible(n, scope))
    totals = pool.totals if scope.nodes else pool_totals(nodes)
    unplaced = tuple(u for u in pool.unplaced if scope.sees_key(u.lease))
    return PoolView(nodes, totals, unplaced)


def _leases(leases: LeasesView, scope: Scope) -> LeasesView:
    def mine(xs: Iterable[LeaseView]) -> tuple[LeaseView, ...]:
        return tuple(x for x in xs if scope.sees_key(x.lease))

    return LeasesView(mine(leases.live), mine(leases.recent), leases.recent_s)


def visible(view: StatusView, scope: Scope) -> StatusView:
    """The part of `view` that `scope` may see (see the module's docstring)."""
    if scope.everything:
        return view
    shown = sorted(scope.namespaces)
    note = (
        f"showing what {scope.user} may read: namespaces {', '.join(shown) or 'none'}"
        f"{'' if scope.nodes else '; only the nodes holding your slices'}"
    )
    return StatusView(
        now=view.now,
        pool=_pool(view.pool, scope),
        tenants=tuple(t for t in view.tenants if scope.sees_tenant(t.name)),
        queue=tuple(q for q in view.queue if scope.sees_key(q.pod) or scope.sees_tenant(q.tenant)),
        leases=_leases(view.leases, scope),
        namespaces=tuple(shown),
        notes=(*view.notes, note),
    )


def in_namespace(view: StatusView, namespace: str) -> StatusView:
    """Only one namespace's leases, slices and queue (the tenants and nodes stay)."""
    one = Scope("", everything=False, nodes=True, namespaces=frozenset({namespace}))
    return replace(
        view,
        pool=_pool(view.pool, one),
        queue=tuple(q for q in view.queue if one.sees_key(q.pod)),
        leases=_leases(view.leases, one),
    )
