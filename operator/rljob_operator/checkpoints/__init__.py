"""Checkpoint layouts of rljob, RLinf and verl: find, verify, and say how to resume.

Pure Python (no torch, no numpy) and read-only, so that the operator's inspector pod can
run it against a checkpoint volume. The API the operator calls:

    find_latest(directory, layout="auto", verify="quick") -> LatestResult
    list_checkpoints(directory, layout="auto", verify="quick") -> tuple[Judged, ...]
    verify_folder(folder, layout="auto", verify="quick") -> Judged
    resume_overrides(framework, checkpoint_path, *, custom_template=None) -> list[str]

Bad input raises CheckpointInputError; an incomplete checkpoint is an answer, not an error.
"""

from .errors import CheckpointInputError
from .latest import Judged, LatestResult, find_latest, list_checkpoints, verify_folder
from .layouts import CHOICES as LAYOUT_CHOICES
from .resume import FRAMEWORKS, resume_overrides
from .verdict import Status, Verdict

__all__ = [
    "FRAMEWORKS",
    "LAYOUT_CHOICES",
    "CheckpointInputError",
    "Judged",
    "LatestResult",
    "Status",
    "Verdict",
    "find_latest",
    "list_checkpoints",
    "resume_overrides",
    "verify_folder",
]
