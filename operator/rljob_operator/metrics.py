"""Prometheus metrics, derived from how a pass changed a job's status, and each job's goodput.

Counting from status transitions (not from handler calls) means a repeated pass
counts nothing twice, and every figure matches what `kubectl get rltj` shows. The goodput
gauges are read from the watch cache when Prometheus scrapes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

from .api.status import JobStatus
from .api.timestamps import parse_iso
from .reconcile.policies import goodput

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


def record_transition(old: JobStatus, new: JobStatus) -> None:
    """Count what changed between two statuses of one job."""
    reason = new.last_end.reason if new.last_end else "Unknown"
    if new.preemptions > old.preemptions:
        PREEMPTIONS.labels(reason=reason).inc()
    if new.failures > old.failures:
        FAILURES.labels(reason=reason).inc()
    before = old.recoveries[-1] if old.recoveries else None
    after = new.recoveries[-1] if new.recoveries else None
    if after is None or after.gang_created_at is None:
        return
    if before and before.attempt == after.attempt and before.gang_created_at:
        return  # counted when that gang was created
    RECOVERIES.labels(kind=after.kind).inc()
    latency = parse_iso(after.gang_created_at) - parse_iso(after.detected_at)
    RECOVERY_LATENCY.observe(latency.total_seconds())
    if after.lost_steps is not None:
        LOST_STEPS.observe(after.lost_steps)


class GoodputCollector:
    """Every job's goodput extended to the moment of the scrape: live, where the status holds
    the figures as of its last write, and read from the watch cache, so a scrape costs no
    API call. A replica that does not act (peering) reports none: its cache is stale."""

    def __init__(self) -> None:
        self.jobs: Callable[[], Iterable[dict[str, Any]]] = list

    def collect(self) -> Iterator[Metric]:
        now = datetime.now(UTC)
        labels = ["namespace", "name"]
        ettr = GaugeMetricFamily(
            "rljob_job_ettr", "Productive training time over wall time, 0 to 1", labels=labels
        )
        seconds = GaugeMetricFamily(
            "rljob_job_seconds",
            "The job's wall time by where it went: waiting, podStart, frameworkStart, "
            "training; productive is training less the steps trained again",
            labels=[*labels, "bucket"],
        )
        lost = GaugeMetricFamily(
            "rljob_job_lost_steps",
            "Finished steps that new gangs had to train again",
            labels=labels,
        )
        for job in self.jobs():
            meta, status = job["metadata"], JobStatus.from_dict(job.get("status"))
            stamp = meta.get("creationTimestamp")
            if not status.goodput or not stamp:
                continue
            figures = goodput.current(status, parse_iso(stamp), now)
            key = [meta["namespace"], meta["name"]]
            if figures.ettr is not None:
                ettr.add_metric(key, figures.ettr)
            for bucket in goodput.BUCKETS:
                seconds.add_metric([*key, bucket], figures[bucket])
            seconds.add_metric([*key, "productive"], figures.productive)
            lost.add_metric(key, figures.lost_steps)
        yield from (ettr, seconds, lost)


JOB_GOODPUT = GoodputCollector()
REGISTRY.register(JOB_GOODPUT)
