"""Checkpoint layouts of rljob, RLinf and verl: find and verify.

Pure Python (no torch, no numpy) and read-only, so that the operator's inspector pod can
run it against a checkpoint volume. The API the operator calls:

    find_latest(directory, layout="auto", verify="quick") -> LatestResult
    list_checkpoints(directory, layout="auto", verify="quick") -> tuple[Judged, ...]
    verify_folder(folder, layout="auto", verify="quick") -> Judged

Bad input raises CheckpointInputError; an incomplete checkpoint is an answer, not an error.
"""

from .errors import CheckpointInputError
from .latest import Judged, LatestResult, find_latest, list_checkpoints, verify_folder
from .layouts import CHOICES as LAYOUT_CHOICES
from .verdict import Status, Verdict

__all__ = [
    "LAYOUT_CHOICES",
    "CheckpointInputError",
    "Judged",
    "LatestResult",
    "Status",
    "Verdict",
    "find_latest",
    "list_checkpoints",
    "verify_folder",
]
