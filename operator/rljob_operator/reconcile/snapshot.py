"""What one pass reads, taken once at its start: the job, its spec parsed and checked, its
status parsed, its pods split by role, what it owns across attempts, their nodes (and how
many of the cluster's take an in-place pod), Kueue's admission, what the priority boost
reads, what the API server serves, and the time. Every decision of the pass reads this and
nothing else, however often the pass decides again after a look at the checkpoints
(reconcile.run gathers it). It is built once, from the cache's one view of the job, and its
taking writes nothing."""

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
from ..runtime.cache import JobView
from .boost.facts import BoostFacts
from .boost.gate import BoostReads, wants_boost
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
    # The cluster's nodes that take a pod with rljob's restart rule now (Ready, not cordoned,
    # their kubelet declaring the feature): whether a new gang can restart in place.
    in_place_nodes: int = 0
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


@dataclass(frozen=True)
class Setup:
    """What every pass of an operator is taken with: the administrator's settings, whether
    the API server serves the Workload API, and where the boost's other reads come from
    (None: a job's boost reads nothing, as where decisions are tried alone)."""

    settings: Settings = DEFAULT_SETTINGS
    workload_api: bool = False
    boost: BoostReads | None = None


def take_snapshot(
    view: JobView, now: datetime, setup: Setup = Setup(), spec: JobSpec | SpecError | None = None
) -> Snapshot:
    """The snapshot of a `view` whose job exists, with its trainers' nodes (None: gone); `spec`
    is the job's spec as `checked_spec` returns it, where the caller kept it from an earlier
    pass."""
    job = view.job
    assert job is not None, "a pass of a job that is gone takes no snapshot"
    ref = job_ref(job)
    if spec is None:
        spec = checked_spec(job, ref)
    status = JobStatus.from_dict(job.get("status"))
    queue = (job["metadata"].get("labels") or {}).get(c.KUEUE_QUEUE_LABEL)
    roles: dict[str, list[dict[str, Any]]] = {c.ROLE_TRAINER: [], c.ROLE_INSPECTOR: []}
    for pod in view.pods:
        roles.get((pod["metadata"].get("labels") or {}).get(c.LABEL_ROLE) or "", []).append(pod)
    trainers = tuple(roles[c.ROLE_TRAINER])
    boost = None
    if setup.boost is not None and wants_boost(spec, queue, status):
        boost = setup.boost.facts(view.kueue, ref, spec, status.attempt, trainers,
                                  setup.settings, now)  # fmt: skip
    return Snapshot(
        job=job,
        spec=spec,
        status=status,
        ref=ref,
        queue=queue,
        trainers=trainers,
        inspectors={pod["metadata"]["name"]: pod for pod in roles[c.ROLE_INSPECTOR]},
        nodes=node_states(view.nodes, now),
        now=now,
        shared=view.shared,
        workload_api=setup.workload_api,
        admission=view.kueue.admission,
        settings=setup.settings,
        boost=boost,
        in_place_nodes=view.in_place_nodes,
    )
