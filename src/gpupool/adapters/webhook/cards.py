"""A card as the webhook knows it from the GpuNodes (pure): its model, the memory a slice may take
on it (`allocatableBytes`) and the card's whole memory (`memoryBytes`, what HAMi and NVML call
the card's size).

A percentage of a card (HAMi's `nvidia.com/gpumem-percentage`) is a share of the whole memory,
capped at what the node offers (`Card.share`)."""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.domain.errors import UnknownGpuModel
from gpupool.domain.models import get_model
from gpupool.domain.reserve import DEFAULT_RESERVE_PCT, allocatable_bytes
from gpupool.domain.units import MiB


@dataclass(frozen=True, slots=True)
class Card:
    """One card a GpuNode reports (or, before any does, one the catalogue describes)."""

    model: str
    allocatable_bytes: int  # what slices may take: the card less the node's reserve
    total_bytes: int | None = None  # the card's whole memory; None: not reported

    @classmethod
    def of(cls, value: Card | tuple[str, int] | tuple[str, int, int]) -> Card:
        """A Card from itself or from a (model, allocatable[, total]) pair, as older callers
        give: the total then comes from the catalogue when the model is in it."""
        if isinstance(value, Card):
            return value
        return cls(*value)

    @classmethod
    def from_catalogue(cls, model: str) -> Card | None:
        """The card the catalogue describes, with the default reserve; None when the catalogue
        does not give the model's size."""
        try:
            total = get_model(model).memory_bytes
        except UnknownGpuModel:
            return None
        if total is None:
            return None
        return cls(model, allocatable_bytes(total, DEFAULT_RESERVE_PCT), total)

    @property
    def whole_bytes(self) -> int:
        """The card's whole memory: the reported total, else the catalogue's size of its model,
        else (a model the catalogue does not size) what slices may take."""
        if self.total_bytes is not None:
            return self.total_bytes
        known = Card.from_catalogue(self.model)
        if known is not None and known.total_bytes is not None:
            return known.total_bytes
        return self.allocatable_bytes

    def share(self, percent: int) -> int:
        """`percent` of the card's whole memory, capped at what a slice may take on it, rounded
        down to a whole MiB (HAMi reads a percentage of the card's memory as NVML reports it)."""
        return min(self.whole_bytes * percent // 100, self.allocatable_bytes) // MiB * MiB

    def capped(self, percent: int) -> bool:
        """True when `percent` of the card is more than the node offers for slices."""
        return self.whole_bytes * percent // 100 > self.allocatable_bytes
