"""What a checkpoint folder is: complete, incomplete (a save that did not finish or was
cleaned up) or corrupt (a finished save whose pieces are damaged), and why. A folder
the caller asked to skip is "excluded", whatever its files say."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Status(StrEnum):
    COMPLETE = "complete"
    INCOMPLETE = "incomplete"
    CORRUPT = "corrupt"
    EXCLUDED = "excluded"


@dataclass(frozen=True)
class Verdict:
    status: Status
    reason: str = ""
    layout: str | None = None  # the layout the folder was judged by, None if none applied

    @property
    def ok(self) -> bool:
        return self.status is Status.COMPLETE


class Incomplete(Exception):
    """Raised by layout checks: a piece is missing or still being written."""


class Corrupt(Exception):
    """Raised by layout checks: a piece that a finished save vouches for is damaged."""
