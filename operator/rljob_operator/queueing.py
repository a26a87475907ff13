"""Kueue's word on a gang it gates: the admission condition of its Workload, and why the gang
waits, in Kueue's words where it says them."""

from __future__ import annotations

from . import constants as c
from .api.reasons import Reason

Admission = tuple[str, str]  # (reason, message) of Kueue's QuotaReserved=False condition


def queue_wait(queue: str | None, admission: Admission | None) -> tuple[str, str]:
    """Why a gang gated by Kueue waits, in Kueue's words where its Workload says them: a
    queue that does not exist (or is stopped) is the user's to fix; quota is a wait."""
    waiting = f"Kueue has not admitted the gang yet (queue {queue})"
    if admission is None:
        return Reason.WAITING_FOR_KUEUE, waiting
    reason, message = admission
    if reason in c.KUEUE_INADMISSIBLE_REASONS:
        return Reason.QUEUE_INADMISSIBLE, f"Kueue cannot admit the gang (queue {queue}): {message}"
    return Reason.WAITING_FOR_KUEUE, f"{waiting}: {message}"
