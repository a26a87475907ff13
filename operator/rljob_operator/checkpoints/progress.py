"""Read the trainer's progress.json: the last finished step, to count work lost in a restart."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..contract import PROGRESS_FILE_NAME


def read_progress_step(directory: str | os.PathLike[str]) -> int | None:
    """The `step` in <directory>/progress.json, or None when there is none to trust."""
    try:
        data = json.loads((Path(directory) / PROGRESS_FILE_NAME).read_text())
    except (OSError, ValueError):
        return None
    step = data.get("step") if isinstance(data, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) and step >= 0 else None
