"""What a job's objects are called, how they are labelled, and how they point back at it: the
one definition the renderer, the cache, the reconcile and the inspector share.

Names are fixed and known ahead (never generateName), so a retried create cannot make twins.
Host names stay the same across attempts, so node 0's DNS name, the rendezvous address, never
changes; pod names carry the attempt, so an old gang's pods and a new gang's never share a name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import constants as c


@dataclass(frozen=True)
class JobRef:
    """The identity of a job that its children point back at."""

    name: str
    namespace: str
    uid: str


def attempt_name(job: str, attempt: int) -> str:
    """The name of what one attempt's gang shares: its PodGroup, its Kueue pod group."""
    return f"{job}-a{attempt}"


def job_of_attempt_name(name: str) -> str | None:
    """The job an attempt_name names, None for a name of another shape."""
    job, sep, attempt = name.rpartition("-a")
    return job if sep and job and attempt.isdigit() else None


def pod_name(job: str, attempt: int, rank: int) -> str:
    return f"{attempt_name(job, attempt)}-n{rank}"


def host_name(job: str, rank: int) -> str:
    return f"{job}-n{rank}"


def service_name(job: str) -> str:
    return job


def labels(job: str, attempt: int | None = None, rank: int | None = None) -> dict[str, str]:
    result = {c.LABEL_JOB: job, c.LABEL_MANAGED_BY: c.MANAGED_BY}
    if attempt is not None:
        result[c.LABEL_ATTEMPT] = str(attempt)
        result[c.LABEL_ROLE] = c.ROLE_TRAINER
    if rank is not None:
        result[c.LABEL_NODE_RANK] = str(rank)
    return result


def owner_reference(job: JobRef) -> dict[str, Any]:
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "name": job.name,
        "uid": job.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
