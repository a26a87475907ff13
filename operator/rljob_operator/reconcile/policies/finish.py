"""A job at rest: finished (its pods stopped, deleted after its TTL) or suspended (no pods;
the next attempt resumes from the newest checkpoint)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ... import constants as c
from ...api.reasons import EventType, Phase, Reason
from ...api.spec import JobSpec
from ...api.timestamps import parse_iso
from ..plan import Pass


def not_deleting(pods: list[dict[str, Any]]) -> list[str]:
    return [pod["metadata"]["name"] for pod in pods if not pod["metadata"].get("deletionTimestamp")]


def finished(p: Pass, spec: JobSpec, trainer_pods: list[dict[str, Any]]) -> None:
    """Stop the pods that still run, and delete the job once its TTL is over."""
    p.plan.delete = not_deleting(
        [
            pod
            for pod in trainer_pods
            if pod.get("status", {}).get("phase") not in c.POD_ENDED_PHASES
        ]
    )
    ttl = spec.ttl_seconds_after_finished
    if ttl is None or not p.status.completion_time:
        return
    expires = parse_iso(p.status.completion_time) + timedelta(seconds=ttl)
    if p.now >= expires:
        p.plan.delete_job = True
    else:
        p.requeue((expires - p.now).total_seconds())


def suspend(p: Pass, trainer_pods: list[dict[str, Any]]) -> None:
    """Suspended means no pods; the next attempt resumes from the newest checkpoint."""
    if p.status.attempt_creation_time:
        p.update(attempt=p.status.attempt + 1, attempt_creation_time=None,
                 attempt_first_step_time=None)  # fmt: skip
    p.plan.delete = not_deleting(trainer_pods)
    if p.status.phase != Phase.SUSPENDED:
        p.phase(Phase.SUSPENDED, Reason.JOB_SUSPENDED, "spec.suspend is true: the job has no pods")
        p.event(
            EventType.NORMAL, Reason.SUSPENDED, "the job is suspended; its pods are being stopped"
        )
