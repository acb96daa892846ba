"""Kubernetes quantities (`12Gi`, `500m`, `1.5`, `2e3`, `-3`) parsed exactly, as fractions.

The apiserver hands webhooks and controllers quantities in canonical form (`0.5Gi` arrives as
`512Mi`, `1.5` as `1500m`), so the parser accepts the whole grammar of
k8s.io/apimachinery/pkg/api/resource and leaves range checks to the caller, which knows what
the number means and can say what to write instead. The text is untrusted: it is refused before
any arithmetic when it is longer than `bounds.MAX_SETTING_CHARS` or its exponent is beyond
`bounds.MAX_EXPONENT`, and after it when its magnitude is beyond what Kubernetes holds
(`bounds.MAX_QUANTITY`), so parsing costs the same whatever number it names.
"""

from __future__ import annotations

import re
from fractions import Fraction

from gpupool.domain.bounds import MAX_EXPONENT, MAX_QUANTITY, MAX_SETTING_CHARS
from gpupool.domain.errors import InvalidQuantity, QuantityOutOfRange

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|[numkMGTPE])?$"
)


def _within(amount: Fraction, what: str, value: object) -> Fraction:
    if abs(amount) > MAX_QUANTITY:
        raise QuantityOutOfRange(
            f"{what} is beyond the largest quantity Kubernetes holds (2^63-1, about 9.2E, "
            f"9223372036854775807); got {_shown(value)}: write a smaller quantity such as 12Gi"
        )
    return amount


def _shown(value: object) -> str:
    text = value if isinstance(value, str) else repr(value)
    return f'"{text[:MAX_SETTING_CHARS]}..."' if len(text) > MAX_SETTING_CHARS else f'"{text}"'


def parse_quantity(value: object, *, what: str = "quantity") -> Fraction:
    """The exact value of a quantity: a string, or a JSON number from int-or-string fields."""
    if isinstance(value, bool) or value is None:
        raise InvalidQuantity(f"{what} must be a quantity such as 12Gi; got {value!r}")
    if isinstance(value, int):
        return _within(Fraction(value), what, value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise InvalidQuantity(f"{what} must be a finite quantity such as 12Gi; got {value!r}")
        return _within(Fraction(value), what, value)
    if not isinstance(value, str):
        raise InvalidQuantity(f"{what} must be a quantity such as 12Gi; got {value!r}")
    if len(value) > MAX_SETTING_CHARS:
        raise QuantityOutOfRange(
            f"{what} is {len(value)} characters long; a quantity has at most "
            f"{MAX_SETTING_CHARS}, such as 12Gi; got {_shown(value)}"
        )
    match = _QUANTITY.match(value.strip())
    if match is None:
        raise InvalidQuantity(f'{what} must be a quantity such as 12Gi; got "{value}"')
    sign, number, suffix = match.group(1), match.group(2), match.group(3) or ""
    amount = Fraction(number)
    if suffix in _BINARY:
        amount *= _BINARY[suffix]
    elif suffix[:1] in ("e", "E"):
        exponent = int(suffix[1:])
        if abs(exponent) > MAX_EXPONENT:
            raise QuantityOutOfRange(
                f"{what} has the exponent {suffix}; gpupool reads exponents from "
                f"e-{MAX_EXPONENT} to e{MAX_EXPONENT} (Kubernetes holds no quantity above "
                f'2^63-1, about 9.2E); got "{value}": write a quantity such as 12Gi'
            )
        amount *= Fraction(10) ** exponent
    else:
        amount *= _DECIMAL[suffix]
    return _within(-amount if sign == "-" else amount, what, value)


def quantity_int(value: object, *, what: str = "quantity", scale: int = 1) -> int:
    """`value × scale` rounded up to an integer (bytes: scale 1; milli: scale 1000)."""
    exact = parse_quantity(value, what=what) * scale
    return -(-exact.numerator // exact.denominator)


def format_quantity(amount: int) -> str:
    """An integer as the shortest exact Kubernetes quantity (`12Gi`, `500M`, `3`)."""
    if amount == 0:
        return "0"
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        if amount % _BINARY[suffix] == 0:
            return f"{amount // _BINARY[suffix]}{suffix}"
    return str(amount)
