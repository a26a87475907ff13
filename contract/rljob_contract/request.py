"""The checkpoint request's value: when the operator asked, and when the node goes, if known.

The operator writes it into the pod's CHECKPOINT_REQUEST_ANNOTATION; a downward-API volume
projects it into the trainer's request file. `2026-12-02T21:00:00Z` asks for a save with the
pod's grace period as the only deadline; `2026-12-02T21:00:00Z deadline=2026-12-02T21:02:00Z`
also says when the first pod of the gang is killed (its node's termination notice, or a
deletion that gave it less than its grace period), which may be sooner than the grace period
after the request. Times are UTC, to the second, in the operator's clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

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
