"""A ClaimSource that needs no API server: an honest implementation of our own interface for
tests and a kwok demo. The Kubernetes-backed one (GET resourceclaims from resource.k8s.io/v1)
is not written yet (docs/dra.md)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from gpupool.node.dra.errors import ClaimNotServable


class InMemoryClaimSource:
    def __init__(self) -> None:
        self._claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.reads = 0

    def put(self, claim: Mapping[str, Any]) -> None:
        meta = claim["metadata"]
        self._claims[(meta["namespace"], meta["name"])] = copy.deepcopy(dict(claim))

    def delete(self, namespace: str, name: str) -> None:
        self._claims.pop((namespace, name), None)

    async def get_claim(self, namespace: str, name: str) -> Mapping[str, Any]:
        self.reads += 1
        claim = self._claims.get((namespace, name))
        if claim is None:
            raise ClaimNotServable(f"claim {namespace}/{name} does not exist (any more)")
        return copy.deepcopy(claim)
