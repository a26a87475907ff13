"""Kubernetes-style conditions on the job's status, as pure list operations."""

from __future__ import annotations

from typing import Any

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
        "type": cond_type,
        "status": wanted,
        "reason": reason,
        "message": message,
        "lastTransitionTime": transition or current["lastTransitionTime"],  # type: ignore[index]
        "observedGeneration": generation,
    }
    if current == updated:
        return conditions, False
    others = [c for c in conditions if c.get("type") != cond_type]
    return [*others, updated], True
