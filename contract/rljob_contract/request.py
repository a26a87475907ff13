"""The checkpoint request's value: when the operator asked, and when the node goes, if known.

The operator writes it into the pod's CHECKPOINT_REQUEST_ANNOTATION; a downward-API volume
projects it into the trainer's request file. `2026-12-02T21:00:00Z` asks for a save with the
pod's grace period as the only deadline; `2026-12-02T21:00:00Z deadline=2026-12-02T21:02:00Z`
also says when the first pod of the gang is killed (its node's termination notice, or a
deletion that gave it less than its grace period), which may be sooner than the grace period
after the request. Times are UTC, to the second, rounded down: the request's in the operator's
clock, the deadline in that of whatever said it (docs/recovery.md, "Clocks").

The operator writes the annotation again when the gang's deadline moves earlier (a drain with a
short grace after a spot warning), so the pod side reads the file at every poll, not once
(`RequestFile`): the first value is the notice, and a later one may bring the deadline nearer,
never further.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_DEADLINE = "deadline="


@dataclass(frozen=True)
class CheckpointRequest:
    requested_at: datetime | None
    deadline: datetime | None  # when the first pod of the gang is killed; None where unknown


def format_request(requested_at: datetime, deadline: datetime | None = None) -> str:
    value = requested_at.astimezone(timezone.utc).strftime(_FORMAT)
    if deadline is not None:
        value += f" {_DEADLINE}{deadline.astimezone(timezone.utc).strftime(_FORMAT)}"
    return value


def parse_request(value: str) -> CheckpointRequest:
    """Any non-empty value is a request; a part that does not parse is left out, never an
    error: a save must not be lost to a malformed time."""
    requested_at = deadline = None
    for part in value.split():
        if part.startswith(_DEADLINE):
            deadline = _parse_time(part[len(_DEADLINE) :])
        elif requested_at is None:
            requested_at = _parse_time(part)
    return CheckpointRequest(requested_at, deadline)


def _parse_time(text: str) -> datetime | None:
    try:
        return datetime.strptime(text, _FORMAT).replace(tzinfo=timezone.utc)
    except ValueError:
        return None


class RequestFile:
    """The request file as the pod side polls it (a downward-API projection of the annotation,
    empty until the operator asks). `value` is the first request read, or the one that brought
    the deadline nearest; `node_ends_at` that deadline on this process's monotonic clock, None
    while no request said one, and `told_at` when it was read (monotonic). The earliest
    deadline read stands: a later one, or an emptied file, changes nothing, so a notice is
    never withdrawn and a deadline never moves away.

    The deadline is a wall-clock time, to the second (the API server's deletionTimestamp, a
    node's taint or annotation, or the operator's clock: docs/recovery.md), turned into this
    node's monotonic clock when the value is read: a node whose wall clock is ahead takes the
    deadline as that much sooner, one behind as that much later."""

    def __init__(self, path: str | None) -> None:
        self.path = Path(path) if path else None
        self.value: str | None = None
        self.deadline: datetime | None = None
        self.node_ends_at: float | None = None
        self.told_at: float | None = None
        self._read: str | None = None  # the last value read, so that each is parsed once

    def poll(self) -> bool:
        """Read the file; whether a request has come (now or before)."""
        if self.path is None:
            return False
        try:
            value = self.path.read_text(encoding="utf-8").strip()
        except OSError:
            value = ""  # not projected (yet): no request
        if value and value != self._read:
            self._read = value
            self._take(value)
        return self.value is not None

    def _take(self, value: str) -> None:
        deadline = parse_request(value).deadline
        first = self.value is None
        if first or (deadline is not None and (self.deadline is None or deadline < self.deadline)):
            self.value = value
            if deadline is not None:
                self.deadline, self.told_at = deadline, time.monotonic()
                self.node_ends_at = self.told_at + deadline.timestamp() - time.time()
