"""`cluster.create_nodes`: every fake node created, a few at a time, each worker on its own
connection, every connection closed, the first error raised."""

from __future__ import annotations

import threading
from typing import Any, cast

import pytest

from gpupool.devcluster.apiclient import KubeApi
from gpupool.devcluster.cluster import create_nodes
from gpupool.devcluster.errors import ApiError
from gpupool.devcluster.nodes import node_specs, parse_gpu_spec


class FakeConnection:
    def __init__(self, api: FakeApi) -> None:
        self.api = api
        self.closed = False
        self.threads: set[int] = set()

    def create(self, path: str, body: dict[str, Any]) -> Any:
        assert not self.closed
        self.threads.add(threading.get_ident())
        name = body["metadata"]["name"]
        if name in self.api.refuse:
            raise ApiError("POST", path, 403, "forbidden")
        with self.api.lock:
            self.api.created.append((path, name))
        return body

    def close(self) -> None:
        self.closed = True


class FakeApi:
    def __init__(self, refuse: frozenset[str] = frozenset()) -> None:
        self.refuse = refuse
        self.lock = threading.Lock()
        self.created: list[tuple[str, str]] = []
        self.connections: list[FakeConnection] = []

    def connection(self) -> FakeConnection:
        conn = FakeConnection(self)
        with self.lock:
            self.connections.append(conn)
        return conn


def test_creates_every_node_on_at_most_workers_connections() -> None:
    api = FakeApi()
    nodes = node_specs(50, parse_gpu_spec("8xA100-80GB"))
    create_nodes(cast(KubeApi, api), nodes, workers=4)
    assert sorted(name for _, name in api.created) == sorted(n.name for n in nodes)
    assert {path for path, _ in api.created} == {"/api/v1/nodes"}
    assert 1 <= len(api.connections) <= 4
    assert all(c.closed for c in api.connections)
    assert all(len(c.threads) == 1 for c in api.connections)  # one thread's connection


def test_the_first_error_is_raised_and_connections_closed() -> None:
    api = FakeApi(refuse=frozenset({"gpu-node-3"}))
    with pytest.raises(ApiError, match="HTTP 403"):
        create_nodes(cast(KubeApi, api), node_specs(10, parse_gpu_spec("1xA100-80GB")))
    assert all(c.closed for c in api.connections)


def test_no_nodes_opens_no_connection() -> None:
    api = FakeApi()
    create_nodes(cast(KubeApi, api), [])
    assert api.connections == []
