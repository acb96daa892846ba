"""The terminal views' text on fixed cluster states (golden files in golden/; regenerate with
GPUPOOL_UPDATE_GOLDEN=1 and read the diff), at most 80 columns wide, the 1,000-node pool too;
and their JSON shape."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pool_fixture import NOW, big_pool, small_pool

from gpupool.adapters import views_json
from gpupool.cli import views_text
from gpupool.cli.views import status_of
from gpupool.state.views.errors import UnknownNode, UnknownTenant

GOLDEN = Path(__file__).parent / "golden"


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("GPUPOOL_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{name} changed; GPUPOOL_UPDATE_GOLDEN=1 rewrites it"
    too_wide = [line for line in text.splitlines() if len(line) > views_text.WIDTH]
    assert not too_wide


SMALL = status_of(small_pool(), NOW)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("status.txt", views_text.render_status(SMALL)),
        ("status-node.txt", views_text.render_node(SMALL, "gpu-node-a")),
        ("status-tenant.txt", views_text.render_tenant(SMALL, "team-a")),
        ("queue.txt", views_text.render_queue(SMALL)),
        ("leases.txt", views_text.render_leases(SMALL)),
    ],
)
def test_the_views_of_a_fixed_pool(name: str, text: str) -> None:
    _golden(name, text)


def test_a_thousand_node_pool_is_summarised_within_80_columns() -> None:
    view = status_of(big_pool(1000), NOW)
    text = views_text.render_status(view)
    _golden("status-1000.txt", text)
    assert len(text.splitlines()) < 50
    assert "... and 990 more nodes" in text
    node = views_text.render_node(view, view.pool.nodes[0].name)
    assert max(len(line) for line in node.splitlines()) <= views_text.WIDTH


def test_unknown_node_and_tenant_say_what_exists() -> None:
    with pytest.raises(UnknownNode, match=r"no GPU node named 'gpu-node-z' \(nodes: gpu-node-a"):
        SMALL.check_node("gpu-node-z")
    with pytest.raises(UnknownTenant, match=r"tenants: team-a, team-b"):
        SMALL.check_tenant("team-z")


def test_the_json_shape() -> None:
    status = json.loads(views_json.status_json(SMALL, None, None))
    assert (status["apiVersion"], status["kind"]) == ("views.gpupool.io/v1", "PoolStatus")
    node = next(n for n in status["nodes"] if n["name"] == "gpu-node-a")
    card = node["cards"][0]
    assert set(card) == {
        "index",
        "model",
        "memoryBytes",
        "usedBytes",
        "freeBytes",
        "computeFreeMilli",
        "fragmentation",
        "healthy",
        "slices",
    }
    assert card["slices"][0]["pod"] == "team-a/infer-1"
    assert status["totals"]["nodes"] == 3
    queue = json.loads(views_json.queue_json(SMALL, "team-a"))
    assert [(q["pod"], q["position"]) for q in queue["items"]] == [
        ("team-a/big-train", 1),
        ("team-a/late-one", None),
    ]
    leases = json.loads(views_json.leases_json(SMALL, None))
    assert len(leases["live"]) == 4 and leases["recent"][0]["pod"] == "team-b/old-job"
