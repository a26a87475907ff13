"""Find and stop the processes of a pod, however they were spawned.

Every process the agent starts carries `RLJOB_NODEAGENT_POD=<node>/<pod uid>` in its
environment, and so does everything it spawns (torchrun's workers start sessions of
their own, so a process group does not reach them). A pod's processes are the live,
non-zombie processes of this user whose initial environment holds that marker.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from .render import MARKER_ENV


def _marker_of(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
            return None
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except (OSError, IndexError):
        return None
    key = MARKER_ENV.encode() + b"="
    for entry in environ.split(b"\0"):
        if entry.startswith(key):
            return entry[len(key) :].decode(errors="replace")
    return None


def marked_processes(match: str) -> list[int]:
    """PIDs whose marker is `match` ("<node>/<uid>") or starts with it followed by '/'."""
    found = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        marker = _marker_of(int(entry.name))
        if marker is not None and (marker == match or marker.startswith(match + "/")):
            found.append(int(entry.name))
    return sorted(found)


def live_processes(node: str | None = None) -> list[int]:
    """Processes of pods of one node agent (all agents when `node` is None)."""
    if node is not None:
        return marked_processes(node)
    me = os.getpid()
    return sorted(
        int(e.name)
        for e in Path("/proc").iterdir()
        if e.name.isdigit() and int(e.name) != me and _marker_of(int(e.name)) is not None
    )


def send(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def signal_group(pid: int, sig: int) -> None:
    """Signal the process group the pod's first process leads (as a runtime signals PID 1)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def kill_leftovers(nodes: list[str]) -> list[int]:
    """SIGKILL every process of pods of these nodes; return their PIDs."""
    killed = []
    for node in nodes:
        pids = marked_processes(node)
        send(pids, signal.SIGKILL)
        killed += pids
    return killed
