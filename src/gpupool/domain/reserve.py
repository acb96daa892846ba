"""The share of each card a node keeps back from slices (driver, context and MPS overheads)."""

from __future__ import annotations

from gpupool.domain.errors import InvalidNode
from gpupool.domain.units import MiB

DEFAULT_RESERVE_PCT = 10.0


def reserved_bytes(total_bytes: int, reserve_pct: float = DEFAULT_RESERVE_PCT) -> int:
    """Bytes held back on a card of `total_bytes`: the share rounded up to a whole MiB."""
    if total_bytes <= 0:
        raise InvalidNode(f"card memory must be positive; got {total_bytes}")
    if not 0 <= reserve_pct < 100:
        raise InvalidNode(
            f"reserved share of a card must be a percentage from 0 to below 100; got {reserve_pct}"
        )
    # Exact rational arithmetic: percent may be fractional (12.5); round up, then to a whole MiB.
    numerator, denominator = float(reserve_pct).as_integer_ratio()
    share = -(-(total_bytes * numerator) // (100 * denominator))
    return min(total_bytes, -(-share // MiB) * MiB)


def allocatable_bytes(total_bytes: int, reserve_pct: float = DEFAULT_RESERVE_PCT) -> int:
    """Bytes of a card that slices may take once the reserve is kept back."""
    return total_bytes - reserved_bytes(total_bytes, reserve_pct)
