"""The job's status: Kubernetes-style conditions as pure list operations, and typed records
for its structures."""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import Enum
from typing import Any, Self

from .reasons import EndKind

Condition = dict[str, Any]


def find_condition(conditions: list[Condition], cond_type: str) -> Condition | None:
    return next((c for c in conditions if c.get("type") == cond_type), None)


def set_condition(
    conditions: list[Condition],
    cond_type: str,
    status: bool,
    reason: str,
    message: str,
    now: str,
    generation: int | None,
) -> tuple[list[Condition], bool]:
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
        return conditions, False
    others = [c for c in conditions if c.get("type") != cond_type]
    return [*others, updated], True


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


def _plain(value: Any) -> Any:
    """A StrEnum as the plain string the API server stores (YAML dumpers refuse subclasses)."""
    return value.value if isinstance(value, Enum) else value


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

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", EndKind(self.kind))


@dataclass(frozen=True)
class BoostBasis(Record):
    """status.priorityBoost: the last boost rljob wrote on the attempt's Workload, and what it
    was computed from (reconcile.priority_boost)."""

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
