"""Quantities as Kubernetes writes them (`12Gi`, `500Mi`, `1G`, `1024`), parsed to bytes."""

from __future__ import annotations

from fractions import Fraction

from gpupool.domain.errors import InvalidQuantity
from gpupool.domain.quantity import parse_quantity

KiB = 1024
MiB = 1024**2
GiB = 1024**3
TiB = 1024**4


def parse_bytes(text: str | int, *, what: str = "quantity") -> int:
    """Parse a positive byte quantity (Kubernetes grammar, rounded up to whole bytes)."""
    try:
        exact = parse_quantity(text, what=what)
    except InvalidQuantity:
        exact = Fraction(0)
    if exact <= 0:
        raise InvalidQuantity(f"{what} must be a positive quantity such as 12Gi; got {text!r}")
    return -(-exact.numerator // exact.denominator)


def format_bytes(value: int) -> str:
    """Render bytes in the largest binary unit that keeps one decimal (`9.5Gi`, `512Mi`)."""
    for unit, size in (("Ti", TiB), ("Gi", GiB), ("Mi", MiB), ("Ki", KiB)):
        if abs(value) >= size:
            amount = value / size
            text = f"{amount:.1f}".rstrip("0").rstrip(".")
            return f"{text}{unit}"
    return f"{value}"
