"""FastPoster's reading of kubeconfig credentials (no network)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lightkube import KubeConfig

from gpupool.adapters.kubernetes.fast_post import FastPoster, UnsupportedCredentials


def _config(user: dict[str, Any], server: str = "http://127.0.0.1:1") -> Any:
    single = KubeConfig.from_dict(
        {
            "clusters": [{"name": "c", "cluster": {"server": server}}],
            "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
    ).get()
    assert single is not None
    return single


def test_exec_credentials_are_refused_with_the_reason() -> None:
    with pytest.raises(UnsupportedCredentials, match="exec"):
        FastPoster.from_config(_config({"exec": {"command": "get-token", "apiVersion": "v1"}}))


def test_static_token_becomes_a_bearer_header() -> None:
    poster = FastPoster.from_config(_config({"token": "abc"}))
    assert poster._headers()["Authorization"] == "Bearer abc"


def test_token_file_is_read_and_reread_after_rotation(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    poster = FastPoster.from_config(_config({"tokenFile": str(token)}))
    assert poster._headers()["Authorization"] == "Bearer first"
    token.write_text("second\n")
    poster._token_read_at = float("-inf")  # as if TOKEN_REREAD_S had passed
    assert poster._headers()["Authorization"] == "Bearer second"


def test_no_credentials_sends_no_authorization() -> None:
    poster = FastPoster.from_config(_config({}))
    assert "Authorization" not in poster._headers()
    assert poster.server == "http://127.0.0.1:1"
