"""Values kept from one pass over a round's objects to the next while what each was made from
is the very same objects: the watch cache's readers hand the same decoded object for an
unchanged resourceVersion, so identity says "unchanged" without a comparison, and a pass over
every pod or lease each round costs a lookup per object instead of the value made again. A
value not asked for in a pass is forgotten at its end (its object is gone). Pure.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import is_
from typing import Generic, TypeVar

T = TypeVar("T")


class Kept(Generic[T]):
    def __init__(self) -> None:
        self._last: dict[str, tuple[tuple[object, ...], T]] = {}  # the last pass's
        self._this: dict[str, tuple[tuple[object, ...], T]] = {}  # this pass's so far

    def get(
        self, key: str, made_from: tuple[object, ...], make: Callable[[], T], *, keep: bool = True
    ) -> T:
        """`key`'s value: the last pass's while `made_from` are the same objects, else `make()`.
        `keep` False: made afresh and not kept (its value depends on more than `made_from`)."""
        last = self._last.get(key) if keep else None
        if (
            last is not None
            and len(last[0]) == len(made_from)
            and all(map(is_, last[0], made_from))
        ):
            value = last[1]
        else:
            value = make()
        if keep:
            self._this[key] = (made_from, value)
        return value

    def pass_done(self) -> None:
        """This pass's values are the ones kept for the next."""
        self._last, self._this = self._this, {}
