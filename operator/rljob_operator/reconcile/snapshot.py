"""What one pass reads, taken once at its start: the job, its spec parsed and checked, its
status parsed, its pods split by role, what it owns across attempts, their nodes, Kueue's
admission, what the priority boost reads, what the API server serves, and the time. Every
decision of the pass reads this and nothing else, however often the pass decides again after
a look at the checkpoints (reconcile.run gathers it)."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from .. import constants as c
from ..api.spec import JobSpec, SpecError, parse_spec
from ..api.status import JobStatus
from ..launcher.identity import JobRef
from ..launcher.pods import check_template
from ..preemption.nodes import NodeState, node_states
from ..queueing import Admission
from .boost.facts import BoostFacts
from .settings import DEFAULT_SETTINGS, Settings


@dataclass(frozen=True)
class Snapshot:
    job: dict[str, Any]
    spec: JobSpec | SpecError  # the error, where the spec or its template is refused
    status: JobStatus
    ref: JobRef
    queue: str | None  # the Kueue LocalQueue the job names, if any
    trainers: tuple[dict[str, Any], ...]
    inspectors: Mapping[str, dict[str, Any]]  # by pod name
    nodes: Mapping[str, NodeState | None]  # the trainers' nodes, read once; None: gone
    now: datetime
    # (kind, name) of the job's Services, ConfigMaps and Workloads that exist (c.SHARED_KINDS)
    shared: frozenset[tuple[str, str]] = frozenset()
    workload_api: bool = False  # the API server serves the Workload API (all-or-nothing gangs)
    admission: Admission | None = None  # why Kueue has not admitted the attempt, where it says
    settings: Settings = DEFAULT_SETTINGS  # the administrator's
    boost: BoostFacts | None = None  # where the job wants a priority boost
    # 128 random bits drawn for this pass: the name of a Secret that nobody may know before
    # rljob makes it (launcher.ray.token_secret_name).
    nonce: str = field(default_factory=lambda: secrets.token_hex(16))

    def with_status(self, status: JobStatus) -> Snapshot:
        """The same moment, with the job as it will look once `status` is written."""
        return replace(self, job=dict(self.job, status=status.to_dict()), status=status)


def job_ref(job: dict[str, Any]) -> JobRef:
    meta = job["metadata"]
    return JobRef(meta["name"], meta["namespace"], meta.get("uid", ""))


def checked_spec(job: dict[str, Any], ref: JobRef) -> JobSpec | SpecError:
    """The job's spec parsed, and its template rendered once to see that it sets nothing of
    rljob's; the error where either is refused. A function of the spec and the job's name
    alone: the same for every pass of one metadata.generation."""
    try:
        spec = parse_spec(job.get("spec") or {})
        check_template(spec, ref)
    except SpecError as exc:
        return exc
    return spec


def take_snapshot(
    job: dict[str, Any],
    pods: list[dict[str, Any]],
    nodes: Mapping[str, dict[str, Any] | None],
    now: datetime,
    workload_api: bool = False,
    admission: Admission | None = None,
    settings: Settings = DEFAULT_SETTINGS,
    shared: frozenset[tuple[str, str]] = frozenset(),
    spec: JobSpec | SpecError | None = None,
) -> Snapshot:
    """`pods` are all of the job's pods, trainers and inspectors; `nodes`, the trainers' nodes
    by name (None: gone); `spec`, the job's spec as `checked_spec` returns it, where the caller
    kept it from an earlier pass."""
    ref = job_ref(job)
    if spec is None:
        spec = checked_spec(job, ref)
    meta = job["metadata"]
    roles: dict[str, list[dict[str, Any]]] = {c.ROLE_TRAINER: [], c.ROLE_INSPECTOR: []}
    for pod in pods:
        roles.get((pod["metadata"].get("labels") or {}).get(c.LABEL_ROLE) or "", []).append(pod)
    return Snapshot(
        job=job,
        spec=spec,
        status=JobStatus.from_dict(job.get("status")),
        ref=ref,
        queue=(meta.get("labels") or {}).get(c.KUEUE_QUEUE_LABEL),
        trainers=tuple(roles[c.ROLE_TRAINER]),
        inspectors={pod["metadata"]["name"]: pod for pod in roles[c.ROLE_INSPECTOR]},
        nodes=node_states(nodes, now),
        now=now,
        shared=shared,
        workload_api=workload_api,
        admission=admission,
        settings=settings,
    )
