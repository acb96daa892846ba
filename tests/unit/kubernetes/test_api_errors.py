"""One API error hierarchy: every client's error status is an ApiServerError of the right kind."""

from __future__ import annotations

import asyncio

import pytest
from lightkube.core.exceptions import ApiError as LightkubeApiError
from lightkube.models.meta_v1 import Status

from gpupool.adapters.extender_http.k8s_api import _typed
from gpupool.adapters.kubernetes.errors import ApiServerError, Conflict, NotFound, api_error
from gpupool.devcluster.errors import ApiError as DevClusterApiError


@pytest.mark.parametrize(
    ("code", "kind"), [(404, NotFound), (409, Conflict), (500, ApiServerError)]
)
def test_a_status_becomes_its_kind_with_the_message(code: int, kind: type) -> None:
    err = api_error(code, "the message")
    assert type(err) is kind and isinstance(err, ApiServerError)
    assert (err.code, err.message) == (code, "the message")
    assert "the message" in str(err)


def test_lightkube_errors_come_out_typed() -> None:
    async def missing() -> None:
        raise LightkubeApiError(status=Status(code=404, message='pods "p" not found'))

    with pytest.raises(NotFound, match='pods "p" not found'):
        asyncio.run(_typed(missing()))


def test_the_dev_cluster_client_error_is_an_api_server_error() -> None:
    err = DevClusterApiError("GET", "/api/v1/pods/p", 404, "not found")
    assert isinstance(err, ApiServerError)
    assert (err.code, err.status, err.message) == (404, 404, "not found")
    assert str(err) == "GET /api/v1/pods/p: HTTP 404: not found"
