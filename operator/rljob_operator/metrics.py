"""Prometheus metrics, derived from how a pass changed a job's status.

Counting from status transitions (not from handler calls) means a repeated pass
counts nothing twice, and every figure matches what `kubectl get rltj` shows.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from .reconcile.decide import parse_iso

PASSES = Counter("rljob_reconcile_passes_total", "Reconcile passes run by this replica")
QUEUE_DEPTH = Gauge("rljob_work_queue_depth", "Jobs waiting in the work queue, ready or delayed")
PREEMPTIONS = Counter(
    "rljob_preemptions_total", "Attempts ended by a preemption or another disruption", ["reason"]
)
FAILURES = Counter("rljob_failures_total", "Attempts ended by a failure of the trainer", ["reason"])
RECOVERIES = Counter("rljob_recoveries_total", "New gangs created after an attempt ended", ["kind"])
RECOVERY_LATENCY = Histogram(
    "rljob_recovery_latency_seconds",
    "From detecting an attempt's end to creating the next gang (operator side)",
    buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300),
)
LOST_STEPS = Histogram(
    "rljob_lost_steps",
    "Finished training steps that a new gang has to train again",
    buckets=(0, 1, 5, 10, 25, 50, 100, 250, 500, 1000),
)


def record_transition(old: dict[str, Any], new: dict[str, Any]) -> None:
    """Count what changed between two statuses of one job."""
    reason = (new.get("lastEnd") or {}).get("reason", "Unknown")
    if new.get("preemptions", 0) > old.get("preemptions", 0):
        PREEMPTIONS.labels(reason=reason).inc()
    if new.get("failures", 0) > old.get("failures", 0):
        FAILURES.labels(reason=reason).inc()
    before = (old.get("recoveries") or [{}])[-1]
    after = (new.get("recoveries") or [{}])[-1]
    if after.get("gangCreatedAt") and not (
        before.get("attempt") == after.get("attempt") and before.get("gangCreatedAt")
    ):
        RECOVERIES.labels(kind=after.get("kind", "Unknown")).inc()
        latency = parse_iso(after["gangCreatedAt"]) - parse_iso(after["detectedAt"])
        RECOVERY_LATENCY.observe(latency.total_seconds())
        if "lostSteps" in after:
            LOST_STEPS.observe(after["lostSteps"])
