"""Metrics come from status transitions, so a repeated pass counts nothing twice."""

from __future__ import annotations

from prometheus_client import REGISTRY
from rljob_operator.api.status import JobStatus
from rljob_operator.metrics import record_transition


def sample(name, **labels):
    return REGISTRY.get_sample_value(name, labels) or 0.0


ENDED = {
    "preemptions": 1,
    "lastEnd": {"attempt": 0, "kind": "Disruption", "reason": "PreemptionByScheduler"},
    "recoveries": [
        {
            "attempt": 1,
            "kind": "Disruption",
            "reason": "PreemptionByScheduler",
            "detectedAt": "2026-11-29T12:00:00.000000Z",
        }
    ],
}
RECREATED = {
    **ENDED,
    "recoveries": [
        {**ENDED["recoveries"][0], "gangCreatedAt": "2026-11-29T12:00:00.250000Z", "lostSteps": 7}
    ],
}


def test_preemption_recovery_and_its_latency_are_counted_once():
    preemptions = sample("rljob_preemptions_total", reason="PreemptionByScheduler")
    recoveries = sample("rljob_recoveries_total", kind="Disruption")
    latency_sum = sample("rljob_recovery_latency_seconds_sum")
    lost = sample("rljob_lost_steps_sum")

    new, ended, recreated = (JobStatus.from_dict(s) for s in ({}, ENDED, RECREATED))
    record_transition(new, ended)
    record_transition(ended, recreated)
    record_transition(recreated, recreated)  # the same status again: nothing new

    assert sample("rljob_preemptions_total", reason="PreemptionByScheduler") == preemptions + 1
    assert sample("rljob_recoveries_total", kind="Disruption") == recoveries + 1
    assert abs(sample("rljob_recovery_latency_seconds_sum") - latency_sum - 0.25) < 1e-6
    assert sample("rljob_lost_steps_sum") == lost + 7
