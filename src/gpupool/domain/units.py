"""Quantities as Kubernetes writes them (`12Gi`, `500Mi`, `1G`, `1024`), parsed to bytes."""

from __future__ import annotations

import re

from gpupool.domain.errors import InvalidQuantity

KiB = 1024
MiB = 1024**2
GiB = 1024**3
TiB = 1024**4

_SUFFIX = {
    "": 1,
    "k": 10**3,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": KiB,
    "Mi": MiB,
    "Gi": GiB,
    "Ti": TiB,
}
_QUANTITY = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(Ki|Mi|Gi|Ti|k|K|M|G|T)?\s*$")


def parse_bytes(text: str | int, *, what: str = "quantity") -> int:
    """Parse a positive byte quantity; raise InvalidQuantity with the expected form otherwise."""
    if isinstance(text, bool):
        raise InvalidQuantity(f"{what} must be a positive quantity such as 12Gi; got {text!r}")
    if isinstance(text, int):
        if text <= 0:
            raise InvalidQuantity(f"{what} must be a positive quantity such as 12Gi; got {text}")
        return text
    match = _QUANTITY.match(str(text))
    if not match:
        raise InvalidQuantity(f"{what} must be a positive quantity such as 12Gi; got {text!r}")
    number, suffix = match.group(1), match.group(2) or ""
    whole, _, frac = number.partition(".")
    scale = _SUFFIX[suffix]
    value = (
        int(whole) * scale + (int(frac) * scale) // (10 ** len(frac))
        if frac
        else int(whole) * scale
    )
    if value <= 0:
        raise InvalidQuantity(f"{what} must be a positive quantity such as 12Gi; got {text!r}")
    return value


def format_bytes(value: int) -> str:
    """Render bytes in the largest binary unit that keeps one decimal (`9.5Gi`, `512Mi`)."""
    for unit, size in (("Ti", TiB), ("Gi", GiB), ("Mi", MiB), ("Ki", KiB)):
        if abs(value) >= size:
            amount = value / size
            text = f"{amount:.1f}".rstrip("0").rstrip(".")
            return f"{text}{unit}"
    return f"{value}"
