"""What a pass reads for the boost of a job that wants one: the snapshot's part for it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...api.status import BoostBasis
from .guards import Classes
from .memory import Refusal, SavedRead


@dataclass(frozen=True)
class BoostFacts:
    """The Kueue Workload of `attempt` as the cache has it, the priority classes' values by
    source (and why they are not known, where a list of them failed or has not been made), a
    refused write that waits out its back-off, the basis of the last write the API server
    took, and the checkpoint folder's last read (at most one a policy interval and attempt;
    None where the gate was closed or the folder could not be read). Gathered by
    boost.gate.BoostReads.facts, read by boost.decide."""

    attempt: int
    workload: dict[str, Any] | None
    classes: Classes
    refusal: Refusal | None = None
    saved: SavedRead | None = None
    classes_unknown: str | None = None
    accepted: BoostBasis | None = None
