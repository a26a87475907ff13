"""Bad-checkpoint suspicion: a checkpoint that the last attempt crashed on while loading.

Resuming from it again would crash again, forever; the job marks it bad (the folder is
kept) and resumes from an older one.
"""

from __future__ import annotations

from ...api.reasons import EndKind
from ...api.status import BadCheckpoint, JobStatus
from ..plan import LookupResult


def suspect_checkpoint(status: JobStatus, lookup: LookupResult) -> BadCheckpoint | None:
    """The checkpoint the last attempt crashed on while loading it, if that is what happened.

    The last attempt resumed from it, failed (not disrupted), finished no step after
    it (per the trainer's progress.json), and it is still the newest complete one.
    Without progress to read, nothing is suspected.
    """
    resumed, last = status.resume_from, status.last_end
    if resumed is None or last is None:
        return None
    if last.kind is not EndKind.FAILURE or last.attempt != status.attempt - 1:
        return None
    if lookup.target is None or lookup.target.path != resumed.path:
        return None
    progress = lookup.last_finished_step
    if progress is None or progress > resumed.step:
        return None
    return BadCheckpoint(
        path=resumed.path,
        step=resumed.step,
        reason=f"attempt {last.attempt} failed ({last.reason}) before finishing a step after "
        "loading it",
    )
