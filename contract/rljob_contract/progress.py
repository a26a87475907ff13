"""progress.json: the last finished step of a run, beside its global_step_N folders.

Written after every finished step by whoever runs the training loop (rljob's trainer; for
RLinf and verl, rljob's bridge inside the framework's own loop) and read by the operator,
which compares the step with the one it resumes from to count the steps a restart lost,
and prices them with the step time. Its keys and statuses are spelled here once.

A framework's run keeps it under its own name (FRAMEWORK_PROGRESS_FILE_NAME): a plain
progress.json beside the step folders marks a directory as written by rljob's trainer,
whose layout (`--layout auto`) is read differently.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from . import ENV_TRAINED_MARKER, untrusted
from .manifest import write_atomically

PROGRESS_FILE_NAME = "progress.json"  # rljob's own trainer
FRAMEWORK_PROGRESS_FILE_NAME = "rljob-progress.json"  # RLinf and verl, through the bridge
PROGRESS_FILE_NAMES = (PROGRESS_FILE_NAME, FRAMEWORK_PROGRESS_FILE_NAME)

STEP = "step"  # the last finished step
STEP_SECONDS = "step_seconds"  # the mean step time of the attempt that wrote it
SAVE_SECONDS = "save_seconds"  # a save's mean time (RLinf, verl: as rljob's bridge measured it)
# Why rljob cannot save on notice in this run (the bridge's hooks found the framework other
# than they expect, or its settings save nothing); absent or null where it can.
SAVE_ON_NOTICE_UNAVAILABLE = "save_on_notice_unavailable"
# Why a save on notice in this run comes later than rljob could make it (a hook that only
# makes it sooner found the framework other than it expects); absent where none did.
SAVE_ON_NOTICE_LATE = "save_on_notice_late"
# When this attempt finished its first and its latest training step (unix seconds), as the
# process that writes the record timed them (StepClock): the operator counts the attempt's
# training between the two, finer than the pod's Ready condition (whole seconds) can.
FIRST_STEP_UNIX_TIME = "attempt_first_step_unix_time"
LAST_STEP_UNIX_TIME = "last_step_unix_time"
STATUS = "status"
ATTEMPT = "attempt"
TIME = "time"
UNIX_TIME = "unix_time"

RUNNING = "running"
FINISHED = "finished"
CHECKPOINTED_ON_REQUEST = "checkpointed_on_request"  # saved this step on notice and stopped


@dataclass
class StepClock:
    """When this process's attempt finished its first and its latest training step.

    The operator learns of an attempt's first step from its pod turning Ready, a time Kubernetes
    keeps in whole seconds; these, in the progress record and the termination message, let it
    count the attempt's training to the step."""

    first: float | None = None
    last: float | None = None

    def stepped(self) -> None:
        """A training step of this attempt has just finished."""
        self.last = time.time()
        if self.first is None:
            self.first = self.last

    @property
    def span(self) -> tuple[float, float] | None:
        """(first, last); None before any step."""
        if self.first is None or self.last is None:
            return None
        return self.first, self.last

    def fields(self) -> dict[str, float]:
        span = self.span
        return {FIRST_STEP_UNIX_TIME: span[0], LAST_STEP_UNIX_TIME: span[1]} if span else {}


# The line a trainer that finished adds to its container's termination message, and the
# operator reads: its attempt's first and last training steps, in unix seconds.
_TRAINED_LINE = "rljob: trained from {first:.3f} to {last:.3f}"
_TRAINED = re.compile(r"^rljob: trained from ([0-9]+(?:\.[0-9]+)?) to ([0-9]+(?:\.[0-9]+)?)$",
                      re.MULTILINE)  # fmt: skip


def trained_span(first: object, last: object) -> tuple[float, float] | None:
    """(first, last) where both are positive numbers in order, as a record or report read from
    a volume or a pod may hold them; else None."""
    first, last = untrusted.positive_number(first), untrusted.positive_number(last)
    return (first, last) if first and last and first <= last else None


def trained_line(first: float, last: float) -> str:
    """The termination message's line for an attempt that trained from `first` to `last`."""
    return _TRAINED_LINE.format(first=first, last=last)


def parse_trained(message: str) -> tuple[float, float] | None:
    """(first, last) from a termination message that has the line; None where it has none or
    the two are out of order (a message is the container's, not to be trusted)."""
    match = _TRAINED.search(message)
    if match is None:
        return None
    first, last = float(match.group(1)), float(match.group(2))
    return (first, last) if first <= last else None


def progress_record(
    step: int,
    attempt: int | None,
    status: str,
    step_seconds: float | None = None,
    save_on_notice_unavailable: str | None = None,
    save_seconds: float | None = None,
    save_on_notice_late: str | None = None,
    clock: StepClock | None = None,
) -> dict[str, object]:
    now = time.time()
    record: dict[str, object] = {
        STEP: step,
        TIME: datetime.fromtimestamp(now, timezone.utc).isoformat(),
        UNIX_TIME: now,
        ATTEMPT: attempt,
        STATUS: status,
        STEP_SECONDS: step_seconds,
        **(clock.fields() if clock else {}),
    }
    if save_on_notice_unavailable:
        record[SAVE_ON_NOTICE_UNAVAILABLE] = save_on_notice_unavailable
    if save_seconds:
        record[SAVE_SECONDS] = save_seconds
    if save_on_notice_late:
        record[SAVE_ON_NOTICE_LATE] = save_on_notice_late
    return record


def mark_trained() -> None:
    """This container has finished a training step of its attempt: create the pod-local file
    that the pod's readiness probe tests (ENV_TRAINED_MARKER), once. Nothing where the pod has
    no probe; never raises, the training is the user's."""
    path = os.environ.get(ENV_TRAINED_MARKER)
    if not path or os.path.exists(path):
        return
    with contextlib.suppress(OSError):  # the pod stays not Ready, the run goes on
        Path(path).touch()


def unmark_trained() -> None:
    """This container has finished its last training step: its pod turns not Ready, so the
    time it then spends ending (the last save sealed, the process group, the exit) is not
    counted as training. Never raises."""
    path = os.environ.get(ENV_TRAINED_MARKER)
    if path:
        with contextlib.suppress(OSError):
            os.unlink(path)


def write_progress(directory: Path, record: dict[str, object], name: str = PROGRESS_FILE_NAME):
    """Write `record` as <directory>/<name>, atomically: a reader never sees half a file."""
    directory.mkdir(parents=True, exist_ok=True)
    write_atomically(directory / name, json.dumps(record) + "\n")
