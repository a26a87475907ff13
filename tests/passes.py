"""The reconcile's pure entry points over plain objects, as the unit tests call them: each
takes the pass's snapshot first, as reconcile.run.Reconciler.observe does from the cache's
view of the job."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from builders import job_ref
from rljob_operator.api.spec import parse_spec
from rljob_operator.api.status import JobStatus
from rljob_operator.launcher.identity import attempt_name
from rljob_operator.queueing import Admission
from rljob_operator.reconcile import decide as decide_module
from rljob_operator.reconcile import run
from rljob_operator.reconcile.boost.decide import decide_boost
from rljob_operator.reconcile.boost.gate import BoostReads
from rljob_operator.reconcile.boost.memory import BoostMemory
from rljob_operator.reconcile.lookup.finder import CheckpointFinder, Inspection
from rljob_operator.reconcile.plan import LookupPending, LookupResult, Plan
from rljob_operator.reconcile.settings import Settings
from rljob_operator.reconcile.snapshot import Setup, Snapshot, take_snapshot
from rljob_operator.runtime.cache import ClusterCache, JobView, KueueView

Nodes = dict[str, dict[str, Any] | None]


def with_status(job: dict[str, Any], status: JobStatus | dict[str, Any]) -> dict[str, Any]:
    """The job as it will look once `status` (a plan's, or one written by hand) is written."""
    return dict(job, status=status.to_dict() if isinstance(status, JobStatus) else status)


def snapshot(
    job: dict[str, Any], pods: list[dict[str, Any]], nodes: Nodes, now: datetime,
    admission: Admission | None = None, shared: frozenset[tuple[str, str]] = frozenset(),
    in_place_nodes: int = 0, **setup: Any,
) -> Snapshot:  # fmt: skip
    """The pass's snapshot of `job`, as the cache would show it: its `pods`, its trainers'
    `nodes`, Kueue's `admission` of its attempt, what it owns (`shared`) and how many of the
    cluster's nodes take a pod with rljob's restart rule; `setup`: Setup's fields."""
    view = JobView(job, pods, shared, nodes, KueueView(admission), in_place_nodes)
    return take_snapshot(view, now, Setup(**setup))


def decide(
    job: dict[str, Any],
    pods: list[dict[str, Any]],
    nodes: Nodes,
    now: datetime,
    lookup: LookupResult | LookupPending | None = None,
    **view: Any,
) -> Plan:
    return decide_module.decide(snapshot(job, pods, nodes, now, **view), lookup)


def fail(job: dict[str, Any], now: datetime, reason: str, message: str) -> Plan:
    return decide_module.fail(snapshot(job, [], {}, now), reason, message)


def plan_pass(
    job: dict[str, Any], pods: list[dict[str, Any]], nodes: Nodes, finder: CheckpointFinder,
    now: datetime,
) -> Plan:  # fmt: skip
    return run.plan_pass(snapshot(job, pods, nodes, now), finder)


def plan_boost_write(
    plan: Plan, job: dict[str, Any], finder: CheckpointFinder, cache: ClusterCache,
    memory: BoostMemory, now: datetime, limit: int = 100,
    pods: list[dict[str, Any]] | None = None, **floors: int,
) -> None:  # fmt: skip
    """The boost's part of a pass whose status is `plan`'s, as the pass observes it (the
    cache, what earlier passes kept in the boost's `memory`, the checkpoint folder through
    `finder`), keeps what it read, and decides it. `limit`: the administrator's largest boost
    (--max-priority-boost); `pods`: the job's; `floors`: the administrator's
    (Settings.min_boost_interval_seconds, .min_gpu_seconds_per_point)."""
    reads = BoostReads(memory, finder)
    setup = Setup(Settings(max_priority_boost=limit, **floors), boost=reads)
    ref = job_ref(job)
    kueue = cache.kueue(ref.namespace, attempt_name(ref.name, plan.status.attempt))
    view = JobView(with_status(job, plan.status), pods or [], frozenset(), {}, kueue)
    snap = take_snapshot(view, now, setup)
    reads.keep(snap.ref, snap.boost)
    decide_boost(plan, snap)


def lookup(finder: CheckpointFinder, job: dict[str, Any]) -> LookupResult | Inspection:
    attempt = (job.get("status") or {}).get("attempt", 0)
    return finder.lookup(parse_spec(job["spec"]), job_ref(job), attempt)
