"""Read the trainer's progress file: the last finished step and the trainer's step time, to
count and price the work lost in a restart."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rljob_contract import progress, untrusted

MAX_BYTES = 1024 * 1024  # the trainer writes a few hundred bytes
MAX_REASON_CHARS = 1000  # of the bridge's words on its save on notice


@dataclass(frozen=True)
class Progress:
    step: int | None = None  # the last finished step
    step_seconds: float | None = None  # the mean step time of the attempt that wrote it
    save_seconds: float | None = None  # a save's mean time, where the writer measured it
    # Why rljob's bridge could not save on notice in the run that wrote it (RLinf, verl).
    save_on_notice_unavailable: str | None = None
    # Why its save on notice came later than rljob could make it, where the bridge said.
    save_on_notice_late: str | None = None
    attempt: int | None = None  # the attempt that wrote it (rljob's RLJOB_ATTEMPT)
    # When that attempt finished its first and its last step (Unix time), as its writer timed them.
    trained: tuple[float, float] | None = None

    def to_report(self) -> dict[str, Any]:
        """The keys `rljob ckpt latest --json` reports them under."""
        return {
            "progress_step": self.step,
            "progress_step_seconds": self.step_seconds,
            "progress_save_seconds": self.save_seconds,
            "save_on_notice_unavailable": self.save_on_notice_unavailable,
            "save_on_notice_late": self.save_on_notice_late,
            "progress_attempt": self.attempt,
            "progress_trained": list(self.trained) if self.trained else None,
        }


def read_progress(directory: str | os.PathLike[str]) -> Progress:
    """What the directory's progress file says (rljob's trainer's, else the one rljob's bridge
    writes for a framework); a field that is missing or not to be trusted is None."""
    found = (Path(directory) / name for name in progress.PROGRESS_FILE_NAMES)
    path = next((p for p in found if p.is_file()), None)
    if path is None:
        return Progress()
    try:
        if path.stat().st_size > MAX_BYTES:
            return Progress()
        data = untrusted.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return Progress()
    if not isinstance(data, dict):
        return Progress()
    step, seconds = data.get(progress.STEP), data.get(progress.STEP_SECONDS)
    return Progress(
        _count(step),
        untrusted.positive_number(seconds),
        untrusted.positive_number(data.get(progress.SAVE_SECONDS)),
        _words(data.get(progress.SAVE_ON_NOTICE_UNAVAILABLE)),
        _words(data.get(progress.SAVE_ON_NOTICE_LATE)),
        _count(data.get(progress.ATTEMPT)),
        progress.trained_span(
            data.get(progress.FIRST_STEP_UNIX_TIME), data.get(progress.LAST_STEP_UNIX_TIME)
        ),
    )


def _count(value: object) -> int | None:
    """A step or an attempt: an int of JSON, not a bool, not negative."""
    good = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return value if good else None


def _words(value: object) -> str | None:
    """The bridge's own words, where they are words, cut to a length a status can carry."""
    return value[:MAX_REASON_CHARS] if isinstance(value, str) and value.strip() else None
