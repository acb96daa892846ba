"""Pure helpers for discovery: board names to catalogue models, XID triage, NVLink domains."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpupool.domain.errors import UnknownGpuModel
from gpupool.domain.models import CATALOGUE, GpuModel, get_model

_VENDOR_WORDS = ("NVIDIA", "TESLA", "GEFORCE", "QUADRO")

# XIDs caused by the application, not the card (the same list NVIDIA's device plugin skips):
# 13 graphics engine exception, 31 GPU memory page fault, 43 GPU stopped processing,
# 45 preemptive cleanup, 68 video processor exception, 109 context switch timeout.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})


def _words(board: str) -> list[str]:
    words = board.replace("_", " ").replace("-", " ").split()
    return [w for w in words if w.upper() not in _VENDOR_WORDS]


def _memory_fits(model: GpuModel, memory_bytes: int | None) -> bool:
    if memory_bytes is None or model.memory_bytes is None:
        return True
    return 0.85 * model.memory_bytes <= memory_bytes <= 1.1 * model.memory_bytes


def model_for_board(board: str, memory_bytes: int | None = None) -> str:
    """Map an NVML board name (`NVIDIA A100-SXM4-80GB`, `NVIDIA H100 80GB HBM3`) to a model.

    Tries the whole name without vendor words, then ever shorter leading parts of it; when the
    match's memory disagrees with what the card reports (a bare `A100` with 80 GB), picks the model
    of the same family whose memory fits. Raises UnknownGpuModel naming the board otherwise.
    """
    words = _words(board)
    found: GpuModel | None = None
    for end in range(len(words), 0, -1):
        try:
            found = get_model("-".join(words[:end]))
            break
        except UnknownGpuModel:
            continue
    if found is not None and not _memory_fits(found, memory_bytes):
        family = found.name.split("-")[0]
        fitting = [
            m for m in CATALOGUE if m.name.split("-")[0] == family and _memory_fits(m, memory_bytes)
        ]
        found = fitting[0] if len(fitting) == 1 else None
    if found is None:
        known = ", ".join(m.name for m in CATALOGUE if m.known)
        memory = f" with {memory_bytes // 2**20} MiB" if memory_bytes is not None else ""
        raise UnknownGpuModel(
            f"GPU board {board!r}{memory} is not in gpupool's catalogue (known: {known}); "
            f"add it to gpupool.domain.models.CATALOGUE with its memory and SM count"
        )
    return found.name


def xid_is_fatal(xid: int, ignored: Iterable[int] = ()) -> bool:
    """Whether an XID error makes the card unhealthy (application XIDs and `ignored` do not)."""
    return xid not in APPLICATION_XIDS and xid not in set(ignored)


def nvlink_domains(links: Mapping[str, Iterable[str]]) -> dict[str, int | None]:
    """Group cards into NVLink domains from each card's NVLink remote endpoints.

    `links` maps a card's uuid to the ids of what its active links reach: other cards' uuids or a
    switch's PCI bus id (NVSwitch). Cards joined directly or through a shared switch share a domain
    (numbered 0, 1, ... in the order of `links`); a card with no active link gets None.
    """
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    reach = {card: tuple(remotes) for card, remotes in links.items()}
    linked: set[str] = set()
    for card, remotes in reach.items():
        find(card)
        for remote in remotes:
            parent[find(card)] = find(remote)
            linked.update((card, remote))
    numbers: dict[str, int] = {}
    domains: dict[str, int | None] = {}
    for card in links:
        if card not in linked:
            domains[card] = None
            continue
        root = find(card)
        domains[card] = numbers.setdefault(root, len(numbers))
    return domains


def nvlink_peers(domains: Mapping[str, int | None]) -> dict[str, tuple[str, ...]]:
    """Each card's peers: the other cards in its NVLink domain, in input order."""
    return {
        card: tuple(o for o, d in domains.items() if o != card and d is not None and d == domain)
        for card, domain in domains.items()
    }
