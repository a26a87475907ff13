"""Classify the end of one pod of the current attempt, from what the cluster shows.

A table of rules, checked in order; the first that matches decides. Disruptions
(preemption, eviction, a lost or terminating node, a stop the trainer was asked
for) restart the gang without spending the failure budget; anything else that
exits non-zero is a failure of the trainer itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

import rljob_contract as contract

from ..api.reasons import Reason
from ..api.spec import RestartPolicy
from .facts import PodFacts

SIGNAL_EXIT_CODES = frozenset({137, 143})  # 128 + SIGKILL, 128 + SIGTERM


class Outcome(StrEnum):
    ACTIVE = "Active"
    SUCCEEDED = "Succeeded"
    DISRUPTED = "Disrupted"
    FAILED = "Failed"


@dataclass(frozen=True)
class PodEnd:
    outcome: Outcome
    reason: str
    message: str
    pod: str
    node: str | None


Rule = Callable[[PodFacts, RestartPolicy], tuple[Outcome, str, str] | None]


def _disruption_target(f: PodFacts, _: RestartPolicy):
    if f.disruption_reason:
        return Outcome.DISRUPTED, f.disruption_reason, "the pod has the DisruptionTarget condition"


def _kueue(f: PodFacts, _: RestartPolicy):
    if f.stopped_by_kueue:
        reason, message = f.stopped_by_kueue
        return (
            Outcome.DISRUPTED,
            Reason.STOPPED_BY_KUEUE,
            f"Kueue stopped the pod ({reason}): {message}",
        )


def _evicted(f: PodFacts, _: RestartPolicy):
    if f.status_reason == "Evicted":
        return Outcome.DISRUPTED, "Evicted", "the kubelet evicted the pod"


def _node_lost(f: PodFacts, _: RestartPolicy):
    if not f.node_known:
        return Outcome.DISRUPTED, Reason.NODE_LOST, f"the pod's node {f.node_name} no longer exists"


def _node_not_ready(f: PodFacts, policy: RestartPolicy):
    waited = f.node_not_ready_seconds
    if waited is not None and waited > policy.node_not_ready_tolerance_seconds:
        return (
            Outcome.DISRUPTED,
            Reason.NODE_NOT_READY,
            f"node {f.node_name} has not been Ready for {waited:.0f}s",
        )


def _deleted_by_someone_else(f: PodFacts, _: RestartPolicy):
    if f.deleting:
        return (
            Outcome.DISRUPTED,
            Reason.POD_DELETED,
            "the pod was deleted by someone other than rljob",
        )


def _succeeded(f: PodFacts, _: RestartPolicy):
    # A sidecar that is a plain container keeps the pod Running after the trainer is done.
    if f.phase == "Succeeded" or (f.phase == "Running" and f.exit_code == 0):
        return Outcome.SUCCEEDED, Reason.COMPLETED, "the trainer exited 0"


def _exit(f: PodFacts, policy: RestartPolicy):
    if f.phase != "Failed" and f.exit_code in (None, 0):
        return None
    code = f.exit_code
    stopped_on_request = contract.CHECKPOINTED_ON_REQUEST_MESSAGE in f.termination_message
    if stopped_on_request or code == contract.EXIT_CHECKPOINTED_ON_REQUEST:
        return (
            Outcome.DISRUPTED,
            Reason.CHECKPOINTED_ON_REQUEST,
            "the trainer saved and stopped as asked",
        )
    if f.termination_message.startswith(contract.STOPPED_ON_NOTICE_MESSAGE):
        return Outcome.DISRUPTED, Reason.STOPPED_ON_NOTICE, _last_line(f.termination_message)
    if code in SIGNAL_EXIT_CODES and f.node_termination:
        return (
            Outcome.DISRUPTED,
            Reason.NODE_TERMINATION,
            f"exit {code} while node {f.node_name} is going away ({f.node_termination.sign})",
        )
    if code is not None and code in policy.retryable_exit_codes:
        return Outcome.DISRUPTED, Reason.RETRYABLE_EXIT_CODE, f"exit code {code} is retryable"
    if f.termination_reason == "OOMKilled":
        return Outcome.FAILED, "OOMKilled", "the trainer ran out of memory (OOMKilled)"
    if code is None:
        return (
            Outcome.FAILED,
            f.status_reason or Reason.POD_FAILED,
            "the pod failed without an exit code",
        )
    said = _last_line(f.termination_message)
    reason = Reason.START_ERROR if f.termination_reason == "StartError" else Reason.EXIT_CODE
    return (
        Outcome.FAILED,
        reason,
        f"the trainer exited with code {code}" + (f": {said}" if said else ""),
    )


def _last_line(message: str, limit: int = 300) -> str:
    """The end of the termination message (or of the log, the kubelet's fallback): the error."""
    lines = [line.strip() for line in message.splitlines() if any(ch.isalnum() for ch in line)]
    return lines[-1][-limit:] if lines else ""


RULES: tuple[Rule, ...] = (
    _disruption_target,
    _kueue,
    _evicted,
    _node_lost,
    _node_not_ready,
    _deleted_by_someone_else,
    _succeeded,
    _exit,
)


def classify_facts(f: PodFacts, policy: RestartPolicy) -> PodEnd:
    for rule in RULES:
        verdict = rule(f, policy)
        if verdict:
            outcome, reason, message = verdict
            if f.short_grace and outcome is Outcome.DISRUPTED:
                message = f"{message}; {f.short_grace}"
            return PodEnd(outcome, reason, message, f.name, f.node_name)
    return PodEnd(Outcome.ACTIVE, f.phase, f"the pod is {f.phase}", f.name, f.node_name)
