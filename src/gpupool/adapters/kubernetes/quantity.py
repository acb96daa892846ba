"""Kubernetes quantities (`12Gi`, `500m`, `1.5`, `2e3`) as exact fractions, then integers."""

from __future__ import annotations

import re
from fractions import Fraction

from gpupool.domain.errors import InvalidQuantity

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|n|u|m|k|M|G|T|P|E)?$"
)


def parse_quantity(value: object, *, what: str = "quantity") -> Fraction:
    """The exact value of a Kubernetes quantity (a string or a JSON number)."""
    if isinstance(value, bool) or value is None:
        raise InvalidQuantity(f"{what} must be a quantity such as 12Gi; got {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value))
    match = _QUANTITY.match(str(value).strip())
    if not match:
        raise InvalidQuantity(f"{what} must be a quantity such as 12Gi or 500m; got {value!r}")
    sign, number, suffix = match.group(1), match.group(2), match.group(3) or ""
    amount = Fraction(number)
    if suffix in _BINARY:
        amount *= _BINARY[suffix]
    elif suffix[:1] in ("e", "E"):
        amount *= Fraction(10) ** int(suffix[1:])
    else:
        amount *= _DECIMAL[suffix]
    return -amount if sign == "-" else amount


def quantity_int(value: object, *, what: str = "quantity", scale: int = 1) -> int:
    """`value × scale` rounded up to an integer (bytes: scale 1; milli: scale 1000)."""
    exact = parse_quantity(value, what=what) * scale
    return -(-exact.numerator // exact.denominator)
