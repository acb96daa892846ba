"""A Unix socket's path is checked against the kernel's limit before anything binds it."""

from __future__ import annotations

import pytest

from gpupool.domain.sockets import SUN_PATH_MAX, SocketPathTooLong, check_socket_path


def test_a_path_at_the_limit_passes_and_one_byte_more_says_what_to_shorten() -> None:
    check_socket_path("/" + "a" * (SUN_PATH_MAX - 1), "the socket", "shorten it")
    with pytest.raises(SocketPathTooLong) as err:
        check_socket_path("/" + "a" * SUN_PATH_MAX, "the real node's socket", "use --dir")
    message = str(err.value)
    assert "the real node's socket" in message and "108 bytes" in message
    assert message.endswith("at most 107 bytes: use --dir")


def test_the_limit_counts_bytes_not_characters() -> None:
    with pytest.raises(SocketPathTooLong):
        check_socket_path("/" + "é" * 60, "the socket", "shorten it")  # 121 bytes, 61 characters
