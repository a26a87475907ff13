"""Read the trainer's progress.json: the last finished step, to count work lost in a restart."""

from __future__ import annotations

import os
from pathlib import Path

from rljob_contract import PROGRESS_FILE_NAME, untrusted

MAX_BYTES = 1024 * 1024  # the trainer writes a few hundred bytes


def read_progress_step(directory: str | os.PathLike[str]) -> int | None:
    """The `step` in <directory>/progress.json, or None when there is none to trust."""
    path = Path(directory) / PROGRESS_FILE_NAME
    try:
        if path.stat().st_size > MAX_BYTES:
            return None
        data = untrusted.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return None
    step = data.get("step") if isinstance(data, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) and step >= 0 else None
