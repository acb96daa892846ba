"""What a workload asks for. Validation happens here, once, with messages a user can act on."""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.domain.errors import InvalidRequest
from gpupool.domain.models import get_model

MILLI = 1000  # one whole GPU in milli-GPU


@dataclass(frozen=True, slots=True)
class Request:
    """A pod's resource request.

    Per GPU a request gives either `gpu_milli` (a share of the card, 1..1000, as the Alibaba
    trace does: the share applies to the card's memory and compute alike) or `gpu_memory_bytes`
    (an absolute slice; `compute_pct` then caps its SM share, absent meaning no hard cap).
    A request for several GPUs takes that slice on each of `gpu_count` distinct cards of one
    node; it takes whole cards only when it asks for them (a share of 1000, or no memory).
    """

    name: str
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_count: int = 0
    gpu_milli: int | None = None
    gpu_memory_bytes: int | None = None
    compute_pct: int | None = None
    models: tuple[str, ...] = ()
    preferred_models: tuple[str, ...] = ()
    avoided_models: tuple[str, ...] = ()
    exclusive: bool = False
    tenant: str = "default"
    priority: int = 0

    def __post_init__(self) -> None:
        who = f"request {self.name!r}" if self.name else "request"
        if self.cpu_milli < 0:
            raise InvalidRequest(f"{who}: cpu must be 0 or more; got {self.cpu_milli}m")
        if self.memory_mib < 0:
            raise InvalidRequest(f"{who}: memory must be 0 or more; got {self.memory_mib}Mi")
        if self.gpu_count < 0:
            raise InvalidRequest(f"{who}: GPU count must be 0 or more; got {self.gpu_count}")
        if self.gpu_count == 0:
            if self.gpu_milli or self.gpu_memory_bytes or self.compute_pct:
                raise InvalidRequest(
                    f"{who}: asks for GPU memory or compute but for 0 GPUs; set the GPU count to 1"
                )
        else:
            if self.gpu_milli is not None and self.gpu_memory_bytes is not None:
                raise InvalidRequest(
                    f"{who}: give either a GPU share (milli) or GPU memory per GPU, not both"
                )
            if self.gpu_milli is not None and not 0 < self.gpu_milli <= MILLI:
                raise InvalidRequest(
                    f"{who}: a GPU share must be between 1 and 1000 milli-GPU (one whole GPU); "
                    f"got {self.gpu_milli}"
                )
            if self.gpu_memory_bytes is not None and self.gpu_memory_bytes <= 0:
                raise InvalidRequest(
                    f"{who}: GPU memory must be a positive quantity such as 12Gi; "
                    f"got {self.gpu_memory_bytes}"
                )
            if self.compute_pct is not None and not 0 < self.compute_pct <= 100:
                raise InvalidRequest(
                    f"{who}: GPU compute must be a percentage from 1 to 100; got {self.compute_pct}"
                )
            if self.gpu_milli is None and self.gpu_memory_bytes is None:
                object.__setattr__(self, "gpu_milli", MILLI)
        for field_name in ("models", "preferred_models", "avoided_models"):
            names = getattr(self, field_name)
            object.__setattr__(self, field_name, tuple(get_model(n).name for n in names))

    @property
    def wants_gpu(self) -> bool:
        return self.gpu_count > 0

    @property
    def whole_cards(self) -> bool:
        """True when every requested card is taken whole."""
        return self.gpu_count >= 1 and self.gpu_milli == MILLI

    @property
    def is_share(self) -> bool:
        """True when the request takes a slice of each of its cards (one card or several)."""
        return self.gpu_count >= 1 and not self.whole_cards

    @property
    def compute_milli(self) -> int:
        """Compute share per GPU in milli (of the card's SMs); 0 when uncapped."""
        if self.gpu_count == 0:
            return 0
        if self.gpu_milli is not None:
            return self.gpu_milli
        return (self.compute_pct or 0) * 10

    @property
    def gpu_request_milli(self) -> int:
        """Total GPU share the request takes, in milli-GPU (memory requests count as compute)."""
        if self.gpu_count == 0:
            return 0
        if self.whole_cards:
            return MILLI * self.gpu_count
        per_card = self.gpu_milli if self.gpu_milli is not None else self.compute_milli
        return per_card * self.gpu_count
