"""Goodput in the job's status: where its wall time went, and its ETTR, pass by pass."""

from __future__ import annotations

from datetime import timedelta

from builders import NOW, make_job
from passes import decide, fail, with_status
from rljob_operator.api.reasons import Phase
from rljob_operator.api.status import JobStatus
from rljob_operator.api.timestamps import iso, parse_iso
from rljob_operator.launcher.pods import ResumeTarget
from rljob_operator.metrics import GoodputCollector
from rljob_operator.reconcile import goodput
from rljob_operator.reconcile.plan import LookupResult
from test_decide import NODES, pods_of


def at(seconds: float):
    return NOW + timedelta(seconds=seconds)


def created_at(seconds: float):
    job = make_job(checkpoint={"resume": "never"})
    job["metadata"]["creationTimestamp"] = iso(at(seconds))
    return job


def live_job_through_one_preemption():
    """Created at 0, gang at 2, Running at 12, preempted at 112, gang back at 114, Running at
    124: 10 s waiting, 100 + later s running, 12 s recovering."""
    job = created_at(0)
    job = with_status(job, decide(job, [], NODES, at(2)).status)
    job = with_status(job, decide(job, pods_of(job), NODES, at(12)).status)
    preempted = pods_of(job, disruption="PreemptionByScheduler")
    job = with_status(job, decide(job, preempted, NODES, at(112)).status)
    job = with_status(job, decide(job, [], NODES, at(114)).status)
    job = with_status(job, decide(job, pods_of(job, attempt=1), NODES, at(124)).status)
    return job


def started_running_since(seconds: float):
    job = make_job()
    job["metadata"]["creationTimestamp"] = iso(at(seconds))
    job = with_status(job, decide(job, [], NODES, at(seconds), LookupResult(None)).status)
    return with_status(job, decide(job, pods_of(job), NODES, at(seconds)).status)


def test_time_goes_to_the_bucket_of_the_phase_the_job_was_in():
    job = live_job_through_one_preemption()

    figures = job["status"]["goodput"]
    assert job["status"]["phase"] == Phase.RUNNING
    assert figures["since"] == "2026-11-29T12:00:00.000000Z"
    assert figures["asOf"] == "2026-11-29T12:02:04.000000Z"
    assert (figures["waitingSeconds"], figures["runningSeconds"]) == (12.0, 100.0)
    assert figures["recoveringSeconds"] == 12.0
    assert figures["wallSeconds"] == 124.0
    assert figures["ettr"] == round(100 / 124, 4)


def test_a_pass_that_changes_nothing_leaves_the_figures_as_they_were():
    job = live_job_through_one_preemption()

    later = decide(job, pods_of(job, attempt=1), NODES, at(1000))

    assert later.status.to_dict() == job["status"]  # nothing to write: no API call for goodput


def test_current_extends_the_stored_figures_to_now_without_a_write():
    job = live_job_through_one_preemption()
    created = parse_iso(job["metadata"]["creationTimestamp"])

    figures = goodput.current(JobStatus.from_dict(job["status"]), created, at(1124))

    assert figures.running == 1100.0 and figures.wall == 1124.0
    assert figures.ettr == 1100 / 1124


def test_lost_steps_priced_with_the_trainers_step_time_come_off_the_running_time():
    job = make_job()
    job["metadata"]["creationTimestamp"] = iso(NOW)
    job = with_status(job, decide(job, [], NODES, NOW, LookupResult(None)).status)
    job = with_status(job, decide(job, pods_of(job), NODES, at(0)).status)
    preempted = pods_of(job, disruption="PreemptionByScheduler")
    job = with_status(job, decide(job, preempted, NODES, at(100)).status)
    lookup = LookupResult(
        ResumeTarget("/checkpoints/global_step_20", 20), last_finished_step=27, step_seconds=4.0
    )

    recreated = decide(job, [], NODES, at(110), lookup)

    figures = recreated.status.goodput
    assert (figures["lostSteps"], figures["lostSeconds"]) == (7, 28.0)
    assert recreated.status.recoveries[-1].lost_seconds == 28.0
    assert figures["ettr"] == round((100 - 28) / 110, 4)


def test_lost_steps_without_a_step_time_are_counted_but_not_priced():
    job = started_running_since(0)
    preempted = pods_of(job, disruption="PreemptionByScheduler")
    job = with_status(job, decide(job, preempted, NODES, at(50)).status)
    lookup = LookupResult(ResumeTarget("/checkpoints/global_step_20", 20), last_finished_step=25)

    figures = decide(job, [], NODES, at(60), lookup).status.goodput

    assert (figures["lostSteps"], figures["lostSeconds"]) == (5, 0.0)
    assert figures["runningSeconds"] == 50.0


def test_a_failures_back_off_is_waiting_and_the_restart_after_it_recovering():
    job = started_running_since(0)
    crashed = pods_of(job, phase="Failed", exit_code=1)
    job = with_status(job, decide(job, crashed, NODES, at(40)).status)
    assert job["status"]["restartAfter"]  # the failure's back-off runs
    backoff_ends = parse_iso(job["status"]["restartAfter"])
    job = with_status(job, decide(job, [], NODES, backoff_ends, LookupResult(None)).status)
    job = with_status(
        job, decide(job, pods_of(job, attempt=1), NODES, backoff_ends + timedelta(seconds=5)).status
    )

    figures = job["status"]["goodput"]
    assert figures["runningSeconds"] == 40.0
    assert figures["waitingSeconds"] == (backoff_ends - at(40)).total_seconds()
    assert figures["recoveringSeconds"] == 5.0


def test_a_finished_job_stops_the_clock():
    job = started_running_since(0)
    done = decide(job, pods_of(job, phase="Succeeded", exit_code=0), NODES, at(300))
    job = with_status(job, done.status)

    assert job["status"]["phase"] == Phase.SUCCEEDED
    assert job["status"]["goodput"]["runningSeconds"] == 300.0
    created = parse_iso(job["metadata"]["creationTimestamp"])
    assert goodput.current(JobStatus.from_dict(job["status"]), created, at(9000)).wall == 300.0


def test_a_job_from_an_older_operator_is_accounted_from_the_first_pass_that_sees_it():
    job = started_running_since(0)
    del job["status"]["goodput"]

    plan = decide(job, pods_of(job), NODES, at(500))

    figures = plan.status.goodput
    assert figures["since"] == figures["asOf"] == "2026-11-29T12:08:20.000000Z"
    assert "ettr" not in figures  # no time has passed: no ratio to show


def test_figures_round_trip_through_the_status():
    figures = goodput.Goodput(NOW, at(90), running=60, recovering=20, waiting=10,
                              lost_steps=3, lost_seconds=6)  # fmt: skip

    again = goodput.Goodput.from_dict(figures.to_dict())

    assert again == figures and again.ettr == 54 / 90


def test_a_job_failed_outside_decide_is_accounted_too():
    job = started_running_since(0)

    plan = fail(job, at(30), "PodRejected", "the API server refused the job's pods")

    assert plan.status.goodput["runningSeconds"] == 30.0


def test_the_gauges_extend_each_jobs_figures_to_the_scrape():
    job = live_job_through_one_preemption()
    unaccounted = make_job(name="new")
    collector = GoodputCollector()
    collector.jobs = lambda: [job, unaccounted]

    families = {family.name: family for family in collector.collect()}

    (ettr,) = families["rljob_job_ettr"].samples
    assert ettr.labels == {"namespace": "ns", "name": "grpo"}
    assert 100 / 124 < ettr.value < 1  # the job has been Running since the status was written
    buckets = {s.labels["bucket"]: s.value for s in families["rljob_job_seconds"].samples}
    assert buckets["running"] > 100 and buckets["recovering"] == 12.0
