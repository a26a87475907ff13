"""The job's status as a type (JobStatus) with a typed record for each of its structures, and
Kubernetes-style conditions as pure list operations."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from enum import Enum
from typing import Any, Self

from .reasons import EndKind, Phase

Condition = dict[str, Any]


def find_condition(conditions: Iterable[Condition], cond_type: str) -> Condition | None:
    return next((c for c in conditions if c.get("type") == cond_type), None)


def set_condition(
    conditions: Iterable[Condition],
    cond_type: str,
    status: bool,
    reason: str,
    message: str,
    now: str,
    generation: int | None,
) -> tuple[tuple[Condition, ...], bool]:
    """Return the conditions with one set, and whether anything changed.

    lastTransitionTime moves only when the status flips, as the convention asks.
    """
    wanted = "True" if status else "False"
    current = find_condition(conditions, cond_type)
    transition = now if current is None or current.get("status") != wanted else None
    updated = {
        "type": _plain(cond_type),
        "status": wanted,
        "reason": _plain(reason),
        "message": message,
        "lastTransitionTime": transition or current["lastTransitionTime"],  # type: ignore[index]
        "observedGeneration": generation,
    }
    if current == updated:
        return tuple(conditions), False
    others = [c for c in conditions if c.get("type") != cond_type]
    return (*others, updated), True


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


def _plain(value: Any) -> Any:
    """A value as the plain JSON the API server stores: a StrEnum as its string (YAML dumpers
    refuse subclasses), a record as its dict, a tuple as a list."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    return value


class Record:
    """A structure of the job's status: a frozen dataclass whose snake_case fields are the
    CRD's camelCase keys. Unset (None) fields are left out; unknown keys are ignored, so an
    older operator reads a newer one's status."""

    def to_dict(self) -> dict[str, Any]:
        values = ((_camel(f.name), getattr(self, f.name)) for f in fields(self))  # type: ignore[arg-type]
        return {key: _plain(value) for key, value in values if value is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        known = {_camel(f.name): f.name for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{known[key]: value for key, value in data.items() if key in known})


@dataclass(frozen=True)
class AttemptEnd(Record):
    """status.lastEnd: the pod end that ended an attempt."""

    attempt: int
    kind: EndKind
    reason: str
    message: str = ""
    pod: str = ""
    node: str = ""  # "" where the pod had no node
    time: str = ""
    trained_since: str | None = None  # its first finished step, as its pod's Ready said

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", EndKind(self.kind))


@dataclass(frozen=True)
class Recovery(Record):
    """One entry of status.recoveries: the timeline of one new gang, filled in as it comes."""

    attempt: int  # the new attempt
    kind: EndKind
    reason: str
    pod: str = ""
    node: str = ""
    detected_at: str = ""
    gang_created_at: str | None = None
    resumed_from_step: int | None = None
    last_finished_step: int | None = None  # from the trainer's progress file, if any
    lost_steps: int | None = None
    lost_seconds: float | None = None
    first_running_at: str | None = None
    first_step_at: str | None = None  # the new gang's first finished step (its pod turned Ready)
    restarted_in_place: int | None = None  # pods of the gang that stayed (launcher.in_place)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", EndKind(self.kind))


@dataclass(frozen=True)
class BoostBasis(Record):
    """status.priorityBoost: the last boost rljob wrote on the attempt's Workload, and what it
    was computed from (reconcile.boost.writes)."""

    boost: int
    at_risk_gpu_seconds: float
    gpus: int
    lost_work_seconds: float
    restart_seconds: float
    time: str


@dataclass(frozen=True)
class ResumeFrom(Record):
    """status.resumeFrom: the checkpoint the current attempt was started from."""

    step: int
    path: str


@dataclass(frozen=True)
class LatestCheckpoint(Record):
    """status.latestCheckpoint: the newest complete checkpoint, when last looked for."""

    step: int
    path: str
    layout: str
    time: str


@dataclass(frozen=True)
class BadCheckpoint(Record):
    """One entry of status.badCheckpoints: passed over by every later lookup."""

    path: str
    step: int
    reason: str


@dataclass(frozen=True)
class CheckpointLookup(Record):
    """status.checkpointLookup: failed looks at the checkpoint directory, in a row, and why
    the current look has not answered while its inspector pod cannot be scheduled or started."""

    failures: int = 0
    message: str | None = None  # why the last one failed
    retry_after: str | None = None  # when the next look may start
    waiting: str | None = None  # e.g. inspector pod grpo-inspect-a0: 0/3 nodes are available: ...


@dataclass(frozen=True)
class RayStatus(Record):
    """status.ray: what `kubectl get` shows of a Ray gang (reconcile.pod_facts.ray_status)."""

    nodes: int
    nodes_running: int
    driver: str


@dataclass(frozen=True)
class JobStatus(Record):
    """The job's status: read once per pass (reconcile.snapshot), changed by the decisions,
    written back as a merge patch of what differs (reconcile.run). A key that is missing
    reads as what the operator starts from; the conditions are written even when there is
    none, as the operator always has."""

    phase: Phase | None = None
    attempt: int = 0
    preemptions: int = 0
    failures: int = 0
    observed_generation: int | None = None
    start_time: str | None = None
    completion_time: str | None = None
    attempt_creation_time: str | None = None
    # When the attempt finished its first training step: its trainer pod turned Ready.
    attempt_first_step_time: str | None = None
    restart_after: str | None = None  # a failure's back-off ends then
    checkpoint_lookup: CheckpointLookup | None = None
    ray: RayStatus | None = None
    last_end: AttemptEnd | None = None
    pod_group: str | None = None
    # The Secret of the job's Ray token, under a random name, recorded once rljob made it.
    ray_token_secret: str | None = None
    resume_from: ResumeFrom | None = None
    latest_checkpoint: LatestCheckpoint | None = None
    priority_boost: BoostBasis | None = None
    bad_checkpoints: tuple[BadCheckpoint, ...] = ()
    recoveries: tuple[Recovery, ...] = ()
    # As written: its figures are rounded, so reading and writing them again would move them
    # (reconcile.policies.goodput reads and writes it).
    goodput: dict[str, Any] | None = None
    conditions: tuple[Condition, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {key: value for key, value in super().to_dict().items()
                if value != [] or key == "conditions"}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Self:
        data = data or {}

        def one(kind: type[Record], key: str) -> Any:
            value = data.get(key)
            return kind.from_dict(value) if value else None

        def each(kind: type[Record], key: str) -> tuple[Any, ...]:
            return tuple(kind.from_dict(value) for value in data.get(key) or ())

        return cls(
            phase=Phase(data["phase"]) if data.get("phase") else None,
            attempt=data.get("attempt", 0),
            preemptions=data.get("preemptions", 0),
            failures=data.get("failures", 0),
            observed_generation=data.get("observedGeneration"),
            start_time=data.get("startTime"),
            completion_time=data.get("completionTime"),
            attempt_creation_time=data.get("attemptCreationTime"),
            attempt_first_step_time=data.get("attemptFirstStepTime"),
            restart_after=data.get("restartAfter"),
            checkpoint_lookup=one(CheckpointLookup, "checkpointLookup"),
            ray=one(RayStatus, "ray"),
            last_end=one(AttemptEnd, "lastEnd"),
            pod_group=data.get("podGroup"),
            ray_token_secret=data.get("rayTokenSecret"),
            resume_from=one(ResumeFrom, "resumeFrom"),
            latest_checkpoint=one(LatestCheckpoint, "latestCheckpoint"),
            priority_boost=one(BoostBasis, "priorityBoost"),
            bad_checkpoints=each(BadCheckpoint, "badCheckpoints"),
            recoveries=each(Recovery, "recoveries"),
            goodput=data.get("goodput"),
            conditions=tuple(data.get("conditions") or ()),
        )

    def with_condition(
        self, cond_type: str, status: bool, reason: str, message: str, now: str,
        generation: int | None,
    ) -> JobStatus:  # fmt: skip
        """The status with one condition set (see set_condition)."""
        conditions, _ = set_condition(
            self.conditions, cond_type, status, reason, message, now, generation
        )
        return replace(self, conditions=conditions)
