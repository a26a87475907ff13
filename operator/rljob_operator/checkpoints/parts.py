"""A run's checkpoints agree on their parts.

Some parts of a checkpoint are written by some runs in every save and by other runs never:
RLinf's reasoning runner writes `data/data.pt` last, its embodied runners never write it,
and only some algorithms have a `critic/`. A layout alone cannot tell a folder of a run that
never writes the part from a save cut short just before it. The run's own history can: if
the nearest older complete folders all have the part, a newer folder without it is torn,
and resuming from it would crash the driver on load and waste a restart of the whole gang.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from .probe import exists

PEERS = 3  # how many older complete folders make a run's habit


def missing_part(folder: Path, parts: Iterable[str], peers: list[Path]) -> str | None:
    """The first of `parts` that every one of `peers` has and `folder` lacks, else None."""
    if not peers:
        return None
    for part in parts:
        if not exists(folder, part) and all(exists(peer, part) for peer in peers):
            return part
    return None


def torn_reason(part: str, peers: list[Path]) -> str:
    names = ", ".join(peer.name for peer in peers)
    return (
        f"{part} is missing, though the older complete checkpoints of this run have it "
        f"({names}): the save was cut short before it"
    )
