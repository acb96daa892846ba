"""RFC 3339 times on the wire: the one implementation is `gpupool.rfc3339` (a leaf the pure
plans may use too); this module keeps the adapters' import path."""

from __future__ import annotations

from gpupool.rfc3339 import format_time, parse_time

__all__ = ["format_time", "parse_time"]
