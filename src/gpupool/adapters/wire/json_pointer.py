"""JSON Pointer (RFC 6901) paths for JSON Patch operations, escaped in one place: a `~` in a
token is written `~0` and a `/` is written `~1` (annotation keys like `gpupool.io/queue` hold a
slash)."""

from __future__ import annotations


def escape(token: str | int) -> str:
    """One reference token, escaped (`~` first, so a written `~1` is not read back as `/`)."""
    return str(token).replace("~", "~0").replace("/", "~1")


def pointer(*tokens: str | int) -> str:
    """The pointer to `tokens`, e.g. pointer("metadata", "annotations", "gpupool.io/queue") is
    "/metadata/annotations/gpupool.io~1queue"."""
    return "".join("/" + escape(t) for t in tokens)
