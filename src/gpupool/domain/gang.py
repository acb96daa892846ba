"""A gang: pods of one distributed job that gpupool admits, places and reclaims all together or
not at all (docs/gangs.md).

A gang lives in one namespace (and so belongs to one tenant): its identity is the namespace and
its name, so a gang of the same name in another namespace is another gang. Every member carries
the same size, the number of pods the gang is complete with.
"""

from __future__ import annotations

from dataclasses import dataclass

# The most pods one gang may have: a bound on what one admission decision weighs together (a
# larger job is unusual enough that refusing it at create, with the bound named, is kinder than
# a queue entry nobody can admit).
MAX_GANG_SIZE = 256


@dataclass(frozen=True, slots=True)
class GangMark:
    """What a pod says of its gang: the gang's name in its namespace and how many pods it has."""

    namespace: str
    name: str
    size: int

    @property
    def key(self) -> str:
        """The gang's identity: `namespace/name`."""
        return f"{self.namespace}/{self.name}"
