"""Who is asking, and what they may see: a bearer token checked with a TokenReview, then
SubjectAccessReviews for the reads the views stand for (`state.views.scope.Scope`).

The web view reads the cluster with its own identity; a person's token is never used to read.
Instead the API server is asked, for that person, the same questions RBAC would answer if they
read the objects themselves: may they list GpuLeases and pods in every namespace (an operator),
list Nodes (the whole pool map), list GpuLeases in namespace N, get GpuQuota T. Answers are kept
for `ttl_s` (a token's review too), so a page refresh costs no API call; a revoked binding shows
within that time.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.authentication_v1 import TokenReviewSpec
from lightkube.models.authorization_v1 import ResourceAttributes, SubjectAccessReviewSpec
from lightkube.resources.authentication_v1 import TokenReview
from lightkube.resources.authorization_v1 import SubjectAccessReview

from gpupool.adapters.wire import names
from gpupool.domain.errors import GpupoolError
from gpupool.state.views.scope import Scope

ANONYMOUS = "system:anonymous"
GROUP = names.GROUP


class Unauthenticated(GpupoolError):
    """No token, or one the API server does not accept (expired, revoked, malformed)."""


class ReviewFailed(GpupoolError):
    """The API server could not answer a TokenReview or SubjectAccessReview."""


@dataclass(frozen=True, slots=True)
class Viewer:
    """A person as the API server authenticated them."""

    user: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    anonymous: bool = False  # --dev-insecure without a token: sees everything


@dataclass(frozen=True, slots=True)
class Question:
    """May the viewer `verb` `resource` (in `group`), in `namespace` ("" all) or by `name`."""

    verb: str
    resource: str
    group: str = ""
    namespace: str = ""
    name: str = ""


class Reviews(Protocol):
    """The API server's two review APIs, as the web view asks them."""

    async def token(self, token: str) -> Viewer | None:
        """The token's user; None when the API server does not accept it."""
        ...

    async def allowed(self, viewer: Viewer, question: Question) -> bool: ...


class KubeReviews:
    """`Reviews` over the API server (needs create on tokenreviews and subjectaccessreviews:
    the `system:auth-delegator` ClusterRole)."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def token(self, token: str) -> Viewer | None:
        try:
            review = await self._client.create(TokenReview(spec=TokenReviewSpec(token=token)))
        except ApiError as err:
            raise ReviewFailed(f"the TokenReview failed: {err.status.message}") from None
        status = review.status
        if status is None or not status.authenticated or status.user is None:
            return None
        user = status.user
        return Viewer(
            user=user.username or "",
            uid=user.uid or "",
            groups=tuple(user.groups or ()),
            extra=tuple(sorted((k, tuple(v)) for k, v in (user.extra or {}).items())),
        )

    async def allowed(self, viewer: Viewer, question: Question) -> bool:
        spec = SubjectAccessReviewSpec(
            user=viewer.user,
            uid=viewer.uid or None,
            groups=list(viewer.groups),
            extra={k: list(v) for k, v in viewer.extra} or None,
            resourceAttributes=ResourceAttributes(
                verb=question.verb,
                resource=question.resource,
                group=question.group,
                namespace=question.namespace or None,
                name=question.name or None,
            ),
        )
        try:
            review = await self._client.create(SubjectAccessReview(spec=spec))
        except ApiError as err:
            raise ReviewFailed(f"the SubjectAccessReview failed: {err.status.message}") from None
        return bool(review.status is not None and review.status.allowed)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()  # tokens are not kept in memory as keys


class Access:
    """Tokens to viewers, viewers to scopes, with answers kept for `ttl_s` (`clock`: seconds)."""

    def __init__(
        self,
        reviews: Reviews,
        clock: Callable[[], float],
        *,
        ttl_s: float = 10.0,
        dev_insecure: bool = False,
    ) -> None:
        self._reviews = reviews
        self._clock = clock
        self._ttl_s = ttl_s
        self.dev_insecure = dev_insecure
        self._tokens: dict[str, tuple[float, Viewer | None]] = {}
        self._answers: dict[tuple[Viewer, Question], tuple[float, bool]] = {}

    async def viewer(self, token: str | None) -> Viewer:
        if not token:
            if self.dev_insecure:
                return Viewer(ANONYMOUS, anonymous=True)
            raise Unauthenticated(
                "log in with a Kubernetes bearer token (the login form, or an "
                "`Authorization: Bearer` header); `kubectl create token NAME` makes one"
            )
        now = self._clock()
        key = _digest(token)
        kept = self._tokens.get(key)
        if kept is None or now - kept[0] > self._ttl_s:
            kept = (now, await self._reviews.token(token))
            self._drop_old(now)
            self._tokens[key] = kept
        if kept[1] is None:
            raise Unauthenticated(
                "the API server does not accept this token: it has expired, been revoked or is "
                "not a token of this cluster; log in again with a fresh one"
            )
        return kept[1]

    async def allowed(self, viewer: Viewer, question: Question) -> bool:
        now = self._clock()
        kept = self._answers.get((viewer, question))
        if kept is None or now - kept[0] > self._ttl_s:
            kept = (now, await self._reviews.allowed(viewer, question))
            self._answers[(viewer, question)] = kept
        return kept[1]

    async def scope(
        self, viewer: Viewer, namespaces: Iterable[str], tenants: Iterable[str]
    ) -> Scope:
        """What `viewer` may see of a view naming `namespaces` and `tenants`."""
        if viewer.anonymous:
            return Scope.operator(viewer.user)
        everywhere = await asyncio.gather(
            self.allowed(viewer, Question("list", "gpuleases", GROUP)),
            self.allowed(viewer, Question("list", "pods")),
            self.allowed(viewer, Question("list", "gpuquotas", GROUP)),
            self.allowed(viewer, Question("list", "nodes")),
        )
        if all(everywhere):
            return Scope.operator(viewer.user)
        ns = sorted(set(namespaces))
        ts = sorted(set(tenants))
        answers = await asyncio.gather(
            *(self.allowed(viewer, Question("list", "gpuleases", GROUP, namespace=n)) for n in ns),
            *(self.allowed(viewer, Question("get", "gpuquotas", GROUP, name=t)) for t in ts),
        )
        return Scope(
            viewer.user,
            everything=False,
            nodes=everywhere[3],
            namespaces=frozenset(n for n, ok in zip(ns, answers[: len(ns)], strict=True) if ok),
            tenants=frozenset(t for t, ok in zip(ts, answers[len(ns) :], strict=True) if ok),
        )

    def _drop_old(self, now: float) -> None:
        """Forget answers past their time, so the caches stay the size of the active users."""
        self._tokens = {k: v for k, v in self._tokens.items() if now - v[0] <= self._ttl_s}
        self._answers = {k: v for k, v in self._answers.items() if now - v[0] <= self._ttl_s}
