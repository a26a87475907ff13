"""Liveness and killing of the test environment's own processes, by pid."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether the process exists and is not a zombie (a zombie child of ours counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def kill_all(pids: list[int], gentle: bool = True) -> None:
    """SIGTERM, a few seconds to exit, then SIGKILL what is left; only SIGKILL if not gentle."""
    steps = ((signal.SIGTERM, 5.0), (signal.SIGKILL, 2.0)) if gentle else ((signal.SIGKILL, 2.0),)
    for sig, grace in steps:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(alive(p) for p in pids):
            time.sleep(0.1)
