"""What a checkpoint folder is: complete, incomplete (a save that did not finish or was
cleaned up) or corrupt (a finished save whose pieces are damaged), and why. A folder
the caller asked to skip is "excluded", whatever its files say."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

# What layout checks raise: a piece missing or still being written, or a piece that a
# finished save vouches for damaged. The contract's, since rljob's own layout is judged there.
from rljob_contract.manifest import Corrupt as Corrupt
from rljob_contract.manifest import Incomplete as Incomplete


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
