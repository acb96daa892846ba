"""The web view's source (adapters/web/source.py): a render that returns the view it holds
publishes nothing; a new view is a new version that waiting streams hear; a failed render keeps
the last view and says why."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "views"))

from pool_fixture import NOW, small_pool

from gpupool.adapters.web.source import StateSource
from gpupool.domain.errors import GpupoolError
from gpupool.state.views.status import StatusView, build_status


def test_only_a_new_view_is_published() -> None:
    async def main() -> None:
        views = [build_status(small_pool(), NOW)]
        fail: list[str] = []

        async def render(now: float) -> StatusView:
            if fail:
                raise GpupoolError(fail[0])
            return views[-1]

        source = StateSource(render, lambda: NOW)
        first = await source.refresh()
        assert first.version == 1 and source.ready.is_set()
        assert await source.refresh() is first  # the same view: nothing published
        assert await source.after(1, 0.05) is None
        views.append(build_status(small_pool(), NOW + 30))
        waiting = asyncio.ensure_future(source.after(1, 5.0))
        second = await source.refresh()
        assert second.version == 2 and await waiting == second
        fail.append("the API server went away")
        third = await source.refresh()
        assert third.view is not None and third.error == "the API server went away"
        assert third.view.now == NOW + 30 and "the API server went away" in third.view.notes[-1]
        assert source.renders == 4

    asyncio.run(main())
