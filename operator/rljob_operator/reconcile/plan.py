"""What a pass decides (a Plan), and the state of one decision while it is made (a Pass)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, ClassVar

from ..api.reasons import CONDITION_FOR_PHASE, EventType, Phase, Reason
from ..api.spec import RestartPolicy, SpecError
from ..api.status import BoostBasis, JobStatus
from ..api.timestamps import iso, parse_iso
from ..frameworks import framework
from ..launcher.pods import ResumeTarget
from .pod_facts import Stuck
from .policies import goodput
from .snapshot import Snapshot


@dataclass(frozen=True)
class Event:
    type: EventType
    reason: str
    message: str


@dataclass(frozen=True)
class LookupResult:
    """What a look at the checkpoint directory found (see reconcile.lookup)."""

    target: ResumeTarget | None
    last_finished_step: int | None = None  # from the trainer's progress.json, if any
    detail: str = ""  # what was rejected, or why nothing was found
    failure: str | None = None  # the look itself failed: nothing is known about the folders
    step_seconds: float | None = None  # the trainer's step time, from progress.json, if any
    # Why rljob's bridge could not save on notice in the run that wrote the progress record.
    save_on_notice_unavailable: str | None = None
    # Why its save on notice came later than rljob could make it, where the bridge said.
    save_on_notice_late: str | None = None
    trained: goodput.TrainedSpan | None = None  # the progress record's attempt, as it timed it


@dataclass(frozen=True)
class LookupPending:
    """A look through an inspector pod that runs and has not reported yet (see
    reconcile.lookup): the pod, and why it has not started where it is stuck."""

    inspector: str
    stuck: Stuck


@dataclass
class Plan:
    status: JobStatus
    create: list[dict[str, Any]] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)  # pod names, deleted with their grace period
    force_delete: list[str] = field(default_factory=list)  # on a node that is gone: grace 0
    request_checkpoint: list[str] = field(default_factory=list)  # pods to ask to save now
    checkpoint_deadline: datetime | None = None  # when the request says the save must be done
    release: list[str] = field(default_factory=list)  # pods whose end is recorded: drop finalizer
    release_first: bool = False  # their end was recorded by an earlier pass: before the creates
    delete_pod_groups: list[str] = field(default_factory=list)  # of attempts that are over
    # In-place restarts (reconcile.policies.in_place): pod name -> the metadata patch that
    # tells a kept pod to stop and wait (after the status write, as deletes are), or that
    # makes it one of the new gang (beside the new gang's pods).
    stop_in_place: dict[str, dict[str, Any]] = field(default_factory=dict)
    run_in_place: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The attempt's Kueue Workload, the priority-boost annotations to merge into it, and what
    # the boost was computed from: for status.priorityBoost once the API server took the write.
    annotate_workload: tuple[str, dict[str, str], BoostBasis] | None = None
    events: list[Event] = field(default_factory=list)
    needs_checkpoint_lookup: bool = False
    delete_job: bool = False
    requeue_after: float | None = None
    # Each field but the status either asks for a write (`act` has something to do where it
    # is set) or only steers: the next pass, the look at the checkpoints, or how a write
    # goes. A test holds every field to one of the two.
    ASKS: ClassVar[frozenset[str]] = frozenset({
        "create", "delete", "force_delete", "request_checkpoint", "release", "delete_pod_groups",
        "stop_in_place", "run_in_place", "annotate_workload", "events", "delete_job",
    })  # fmt: skip
    STEERS: ClassVar[frozenset[str]] = frozenset({
        "checkpoint_deadline", "release_first", "needs_checkpoint_lookup", "requeue_after",
    })  # fmt: skip

    def requeue(self, seconds: float) -> None:
        """Ask for a pass in `seconds` at the latest."""
        current = self.requeue_after
        self.requeue_after = seconds if current is None else min(current, seconds)

    def asks_for_nothing(self) -> bool:
        """Nothing to create, delete, release, ask, annotate, tell or delete the job for: what
        is left (the status aside) only steers."""
        return not any(getattr(self, name) for name in self.ASKS)

    @property
    def lookup_exclude(self) -> tuple[str, ...]:
        """Checkpoints a lookup must pass over: those marked bad."""
        return tuple(b.path for b in self.status.bad_checkpoints)


class Pass:
    """The state of one decision: the status being built, and what to do (the plan, which
    takes the status once the pass is `done`)."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.now = snap.now
        self.ref = snap.ref
        self.generation = snap.job["metadata"].get("generation")
        self.status = replace(snap.status, observed_generation=self.generation)
        self.plan = Plan(status=self.status)
        self.not_ready_tolerance: float = RestartPolicy().node_not_ready_tolerance_seconds
        self.lost: tuple[int, float | None] | None = None  # (steps, seconds) a new gang lost
        self.retiming: tuple[goodput.Move, ...] = ()  # an ended attempt's training, retimed
        self.old_gang_runs = False  # a pod of an ended attempt may still run

    def update(self, **changes: Any) -> None:
        """Change fields of the status being built (JobStatus is frozen: one value per step)."""
        self.status = replace(self.status, **changes)

    def event(self, type_: EventType, reason: str, message: str) -> None:
        self.plan.events.append(Event(type_, reason, message))

    def condition(self, cond_type: str, status: bool, reason: str, message: str) -> None:
        self.status = self.status.with_condition(
            cond_type, status, reason, message, iso(self.now), self.generation
        )

    def phase(self, phase: Phase, reason: str, message: str) -> None:
        """Set the phase and its condition; the other phase conditions become False."""
        changed = self.status.phase != phase
        self.update(phase=phase)
        for name, cond_type in CONDITION_FOR_PHASE.items():
            if name == phase:
                self.condition(cond_type, True, reason, message)
            elif any(x["type"] == cond_type for x in self.status.conditions):
                self.condition(cond_type, False, reason, message)
        if changed and phase in (Phase.SUCCEEDED, Phase.FAILED):
            self.update(completion_time=iso(self.now))

    def fail(self, reason: Reason, message: str) -> None:
        """The job has failed, for a reason the user must act on: say so, once."""
        self.phase(Phase.FAILED, reason, message)
        self.event(EventType.WARNING, reason, message)

    def requeue(self, seconds: float) -> None:
        self.plan.requeue(seconds)

    def done(self) -> Plan:
        """The plan, with the status the pass built."""
        self.plan.status = self.status
        return self.plan


def account(
    plan: Plan, snap: Snapshot, lost: tuple[int, float | None] | None = None,
    retiming: tuple[goodput.Move, ...] = (),
) -> None:  # fmt: skip
    """Bring the plan's status.goodput up to date, only when the pass writes the status anyway;
    `lost`: the (steps, seconds) a new gang lost; `retiming`: the moves that put an ended
    attempt's training where its trainer timed it."""
    before, job = snap.status, snap.job
    written = job.get("status") or {}  # as stored: what the pass's patch is made against
    if before.goodput is not None and plan.status.to_dict() == written and not lost:
        return
    stamp = job["metadata"].get("creationTimestamp")
    created = parse_iso(stamp) if stamp else snap.now
    spec = snap.spec
    steps_seen = not isinstance(spec, SpecError) and framework(spec.framework).reports_steps
    figures = goodput.brought_up_to_date(before, plan.status, created, snap.now, lost, steps_seen,
                                         retiming)  # fmt: skip
    plan.status = replace(plan.status, goodput=figures)
