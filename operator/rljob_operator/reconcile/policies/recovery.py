"""The recovery record, status.recoveries: one entry per new gang, filled in as it happens.

Detected (the attempt ended), gang created (from which step, how many steps lost), first
pod running, first step finished. Latency figures and the lost-steps metric are computed
from it.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from ...api.status import AttemptEnd, Recovery
from ...api.timestamps import iso_precise
from ...launcher.pods import ResumeTarget
from ..plan import LookupResult

MAX_RECOVERIES = 20

Recoveries = tuple[Recovery, ...]


def record_detection(records: Recoveries, end: AttemptEnd, now: datetime) -> Recoveries:
    """A new entry: attempt `end.attempt + 1` is to replace the one that ended."""
    detected = Recovery(
        attempt=end.attempt + 1, kind=end.kind, reason=end.reason, pod=end.pod, node=end.node,
        detected_at=iso_precise(now),
    )  # fmt: skip
    return (*records, detected)[-MAX_RECOVERIES:]


def record_gang_creation(
    records: Recoveries,
    attempt: int,
    resume: ResumeTarget | None,
    lookup: LookupResult | None,
    now: datetime,
    restarted_in_place: int = 0,
) -> tuple[Recoveries, tuple[int, float | None] | None]:
    """Complete the entry of `attempt`: when its gang came back, from where, what was lost,
    how many of its pods stayed and were restarted in place.

    Also returns the steps lost and what they cost to train again (None where the trainer's
    step time is unknown), if the lost steps are known.
    """
    if not records or records[-1].attempt != attempt:
        return records, None
    last = replace(records[-1], gang_created_at=iso_precise(now),
                   restarted_in_place=restarted_in_place or None)  # fmt: skip
    if resume:
        last = replace(last, resumed_from_step=resume.step)
    lost: tuple[int, float | None] | None = None
    if lookup and lookup.last_finished_step is not None:
        steps = max(0, lookup.last_finished_step - (resume.step if resume else 0))
        seconds = steps * lookup.step_seconds if lookup.step_seconds else None
        last = replace(
            last,
            last_finished_step=lookup.last_finished_step,
            lost_steps=steps,
            lost_seconds=round(seconds, 1) if seconds is not None else None,
        )
        lost = (steps, seconds)
    return (*records[:-1], last), lost


def record_first_step(records: Recoveries, attempt: int, at: datetime) -> Recovery | None:
    """The entry of `attempt`, having learnt when its gang finished its first step (once);
    None where there is none to complete."""
    last = records[-1] if records else None
    if last is None or last.attempt != attempt or last.first_step_at:
        return None
    return replace(last, first_step_at=iso_precise(at))


def record_first_running(records: Recoveries, attempt: int, now: datetime) -> Recoveries:
    """The entry of `attempt` learns when a pod of its gang first ran (once)."""
    if records and records[-1].attempt == attempt and not records[-1].first_running_at:
        return (*records[:-1], replace(records[-1], first_running_at=iso_precise(now)))
    return records
