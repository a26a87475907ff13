"""Goodput in the job's status: where its wall time went, and its ETTR, pass by pass."""

from __future__ import annotations

from datetime import timedelta

from builders import NOW, make_job, make_pod
from passes import decide, fail, with_status
from rljob_contract import progress
from rljob_operator.api.reasons import Phase
from rljob_operator.api.status import JobStatus
from rljob_operator.api.timestamps import iso, parse_iso
from rljob_operator.launcher.pods import ResumeTarget
from rljob_operator.metrics import GoodputCollector
from rljob_operator.reconcile.plan import LookupResult
from rljob_operator.reconcile.policies import goodput
from test_decide import NODES, pods_of


def at(seconds: float):
    return NOW + timedelta(seconds=seconds)


def created_at(seconds: float):
    job = make_job(checkpoint={"resume": "never"})
    job["metadata"]["creationTimestamp"] = iso(at(seconds))
    return job


def stepped(job, attempt=0, since=0.0, **kwargs):
    """The attempt's pods, Ready since `since` s: the trainer marked them once a step of the
    attempt was done (their readiness probe passed)."""
    return pods_of(job, attempt=attempt, ready_since=iso(at(since)), **kwargs)


def preempted_at_112():
    """Created at 0, gang at 2, Running at 12, first step at 20 (seen at 22), preempted at 112
    (seen then)."""
    job = created_at(0)
    job = with_status(job, decide(job, [], NODES, at(2)).status)
    job = with_status(job, decide(job, pods_of(job), NODES, at(12)).status)
    job = with_status(job, decide(job, stepped(job, since=20), NODES, at(22)).status)
    preempted = stepped(job, since=20, disruption="PreemptionByScheduler")
    return with_status(job, decide(job, preempted, NODES, at(112)).status)


def live_job_through_one_preemption():
    """preempted_at_112, then the gang back at 114, Running at 124, first step at 130 (seen at
    131): 2 s waiting, 22 s pod start, 14 s framework start, 93 s training."""
    job = preempted_at_112()
    job = with_status(job, decide(job, [], NODES, at(114)).status)
    job = with_status(job, decide(job, pods_of(job, attempt=1), NODES, at(124)).status)
    job = with_status(job, decide(job, stepped(job, 1, since=130), NODES, at(131)).status)
    return job


def started_running_since(seconds: float):
    """A job whose gang ran, and finished its first step, at `seconds`."""
    job = make_job()
    job["metadata"]["creationTimestamp"] = iso(at(seconds))
    job = with_status(job, decide(job, [], NODES, at(seconds), LookupResult(None)).status)
    return with_status(job, decide(job, stepped(job, since=seconds), NODES, at(seconds)).status)


def test_time_goes_to_the_cause_of_the_state_the_job_was_in():
    job = live_job_through_one_preemption()

    figures = job["status"]["goodput"]
    assert job["status"]["phase"] == Phase.RUNNING
    assert figures["since"] == "2026-11-29T12:00:00.000000Z"
    assert figures["asOf"] == "2026-11-29T12:02:11.000000Z"
    assert (figures["waitingSeconds"], figures["podStartSeconds"]) == (2.0, 22.0)
    assert (figures["frameworkStartSeconds"], figures["trainingSeconds"]) == (14.0, 93.0)
    assert figures["wallSeconds"] == 131.0 == 2 + 22 + 14 + 93
    assert figures["productiveSeconds"] == 93.0 and figures["ettr"] == round(93 / 131, 4)
    assert "ettrIsUpperBound" not in figures


def test_the_first_step_ends_the_recovery_with_its_causes_in_the_record_and_an_event():
    job = live_job_through_one_preemption()
    before = dict(job, status=dict(job["status"], attemptFirstStepTime=None))
    before["status"]["recoveries"] = [
        {k: v for k, v in r.items() if k != "firstStepAt"} for r in job["status"]["recoveries"]
    ]

    plan = decide(before, stepped(job, 1, since=130), NODES, at(131))

    (record,) = plan.status.recoveries
    assert (record.detected_at, record.first_running_at, record.first_step_at) == (
        "2026-11-29T12:01:52.000000Z", "2026-11-29T12:02:04.000000Z",
        "2026-11-29T12:02:10.000000Z",
    )  # fmt: skip
    (event,) = [e for e in plan.events if e.reason == "FirstStep"]
    assert event.message == (
        "first step after resume: 18s after detection (pod start 12s, framework start 6s)"
    )


def test_a_pod_that_runs_without_a_ready_trainer_never_counts_as_training():
    """Pods that run, and run again after a restart, without the trainer finishing a step of
    the attempt (no Ready pod): all of it is framework start, none of it training."""
    job = created_at(0)
    job = with_status(job, decide(job, [], NODES, at(0)).status)
    job = with_status(job, decide(job, pods_of(job), NODES, at(10)).status)
    crashed = pods_of(job, disruption="PreemptionByScheduler")
    job = with_status(job, decide(job, crashed, NODES, at(70)).status)

    figures = job["status"]["goodput"]
    assert figures["trainingSeconds"] == 0.0 and figures["frameworkStartSeconds"] == 60.0
    assert figures["ettr"] == 0.0
    assert not job["status"].get("attemptFirstStepTime")


def test_ready_pods_of_a_framework_whose_steps_rljob_cannot_see_are_an_upper_bound():
    """`framework: custom` has no readiness probe: its pods are Ready as they run, which says
    nothing of its steps. From running on, the time counts as training, marked as a bound."""
    job = make_job(framework="custom", command=["python", "train.py"])
    job["metadata"]["creationTimestamp"] = iso(at(0))
    job = with_status(job, decide(job, [], NODES, at(0), LookupResult(None)).status)
    job = with_status(job, decide(job, stepped(job, since=10), NODES, at(10)).status)
    job = with_status(job, decide(job, [], NODES, at(40)).status)  # gone: a pass writes

    figures = job["status"]["goodput"]
    assert (figures["podStartSeconds"], figures["trainingSeconds"]) == (10.0, 30.0)
    assert figures["frameworkStartSeconds"] == 0.0 and figures["ettrIsUpperBound"] is True
    assert not job["status"].get("attemptFirstStepTime")


def test_a_ray_gangs_first_step_is_its_heads_readiness_not_a_workers():
    """A Ray worker has no probe: Ready as it runs, which says nothing of the driver's steps.
    Only the head, whose node program marks it once the bridge reports a step, counts."""
    job = make_job(framework="verl", command=["python3", "-m", "verl.trainer.main_ppo",
                                              "trainer.save_freq=4"])  # fmt: skip
    job["metadata"]["creationTimestamp"] = iso(at(0))
    for _ in range(2):  # the Ray token's Secret, then the gang
        job = with_status(job, decide(job, [], NODES, at(0), LookupResult(None)).status)
    assert job["status"]["attemptCreationTime"]
    head = make_pod(job, 0, 0, node="gpu-node-0")
    worker = make_pod(job, 0, 1, node="gpu-node-1", ready_since=iso(at(2)))

    starting = decide(job, [head, worker], NODES, at(5)).status
    head = make_pod(job, 0, 0, node="gpu-node-0", ready_since=iso(at(40)))
    trained = decide(with_status(job, starting), [head, worker], NODES, at(41)).status

    assert starting.attempt_first_step_time is None
    assert trained.attempt_first_step_time == "2026-11-29T12:00:40.000000Z"


def test_a_gang_that_cannot_be_placed_is_waiting_not_starting():
    job = created_at(0)
    job = with_status(job, decide(job, [], NODES, at(0)).status)
    unplaced = [make_pod(job, 0, rank, phase="Pending", node=None) for rank in range(2)]
    for pod in unplaced:
        pod["status"]["conditions"].append(
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/2 nodes",
            }
        )
    job = with_status(job, decide(job, unplaced, NODES, at(5)).status)
    job = with_status(job, decide(job, pods_of(job), NODES, at(65)).status)

    figures = job["status"]["goodput"]
    assert (figures["podStartSeconds"], figures["waitingSeconds"]) == (5.0, 60.0)


def test_a_pass_that_changes_nothing_leaves_the_figures_as_they_were():
    job = live_job_through_one_preemption()

    later = decide(job, pods_of(job, attempt=1), NODES, at(1000))

    assert later.status.to_dict() == job["status"]  # nothing to write: no API call for goodput


def test_current_extends_the_stored_figures_to_now_without_a_write():
    job = live_job_through_one_preemption()
    created = parse_iso(job["metadata"]["creationTimestamp"])

    figures = goodput.current(JobStatus.from_dict(job["status"]), created, at(1131))

    assert figures[goodput.TRAINING] == 1093.0 and figures.wall == 1131.0
    assert figures.ettr == 1093 / 1131


def test_lost_steps_priced_with_the_trainers_step_time_come_off_the_training_time():
    job = started_running_since(0)
    preempted = stepped(job, disruption="PreemptionByScheduler")
    job = with_status(job, decide(job, preempted, NODES, at(100)).status)
    lookup = LookupResult(
        ResumeTarget("/checkpoints/global_step_20", 20), last_finished_step=27, step_seconds=4.0
    )

    recreated = decide(job, [], NODES, at(110), lookup)

    figures = recreated.status.goodput
    assert (figures["lostSteps"], figures["lostSeconds"]) == (7, 28.0)
    assert recreated.status.recoveries[-1].lost_seconds == 28.0
    assert (figures["trainingSeconds"], figures["productiveSeconds"]) == (100.0, 72.0)
    assert figures["ettr"] == round((100 - 28) / 110, 4)


def test_lost_steps_without_a_step_time_are_counted_but_not_priced():
    job = started_running_since(0)
    preempted = stepped(job, disruption="PreemptionByScheduler")
    job = with_status(job, decide(job, preempted, NODES, at(50)).status)
    lookup = LookupResult(ResumeTarget("/checkpoints/global_step_20", 20), last_finished_step=25)

    figures = decide(job, [], NODES, at(60), lookup).status.goodput

    assert (figures["lostSteps"], figures["lostSeconds"]) == (5, 0.0)
    assert figures["trainingSeconds"] == 50.0


def test_a_failures_back_off_is_waiting_and_the_restart_after_it_pod_start():
    job = started_running_since(0)
    crashed = stepped(job, phase="Failed", exit_code=1)
    job = with_status(job, decide(job, crashed, NODES, at(40)).status)
    assert job["status"]["restartAfter"]  # the failure's back-off runs
    backoff_ends = parse_iso(job["status"]["restartAfter"])
    job = with_status(job, decide(job, [], NODES, backoff_ends, LookupResult(None)).status)
    job = with_status(
        job, decide(job, pods_of(job, attempt=1), NODES, backoff_ends + timedelta(seconds=5)).status
    )

    figures = job["status"]["goodput"]
    assert figures["trainingSeconds"] == 40.0
    assert figures["waitingSeconds"] == (backoff_ends - at(40)).total_seconds()
    assert figures["podStartSeconds"] == 5.0


def test_a_finished_job_stops_the_clock():
    job = started_running_since(0)
    done = decide(job, stepped(job, phase="Succeeded", exit_code=0), NODES, at(300))
    job = with_status(job, done.status)

    assert job["status"]["phase"] == Phase.SUCCEEDED
    assert job["status"]["goodput"]["trainingSeconds"] == 300.0
    created = parse_iso(job["metadata"]["creationTimestamp"])
    assert goodput.current(JobStatus.from_dict(job["status"]), created, at(9000)).wall == 300.0


def test_a_finished_jobs_end_after_its_last_step_is_stopping_not_training():
    """The trainer takes its mark back after its last step: its pods turn not Ready, and
    the time from then until the job is seen finished (the last save sealed, the processes
    ending) is stopping."""
    job = started_running_since(0)
    ended = stepped(job, phase="Succeeded", exit_code=0)
    for pod in ended:
        pod["status"]["conditions"] = [{"type": "Ready", "status": "False",
                                        "lastTransitionTime": iso(at(250))}]  # fmt: skip
    job = with_status(job, decide(job, ended, NODES, at(256)).status)

    figures = job["status"]["goodput"]
    assert job["status"]["phase"] == Phase.SUCCEEDED
    assert (figures["trainingSeconds"], figures["stoppingSeconds"]) == (250.0, 6.0)
    assert figures["ettr"] == round(250 / 256, 4)


def test_a_job_from_an_older_operator_is_accounted_from_the_first_pass_that_sees_it():
    job = started_running_since(0)
    del job["status"]["goodput"]

    plan = decide(job, stepped(job), NODES, at(500))

    figures = plan.status.goodput
    assert figures["since"] == figures["asOf"] == "2026-11-29T12:08:20.000000Z"
    assert "ettr" not in figures  # no time has passed: no ratio to show


def test_figures_round_trip_through_the_status():
    seconds = {goodput.TRAINING: 60, goodput.FRAMEWORK_START: 5, goodput.POD_START: 15,
               goodput.WAITING: 10}  # fmt: skip
    figures = goodput.Goodput(NOW, at(90), seconds, lost_steps=3, lost_seconds=6)

    again = goodput.Goodput.from_dict(figures.to_dict())

    assert again == figures and again.ettr == 54 / 90


def test_an_older_operators_figures_are_read_as_the_causes_they_came_closest_to():
    older = {"since": iso(NOW), "asOf": iso(at(90)), "runningSeconds": 60,
             "recoveringSeconds": 20, "waitingSeconds": 10, "lostSteps": 0}  # fmt: skip

    figures = goodput.Goodput.from_dict(older)

    assert (figures[goodput.TRAINING], figures[goodput.POD_START]) == (60, 20)
    assert figures[goodput.FRAMEWORK_START] == 0 and figures.ettr == 60 / 90


def test_a_job_failed_outside_decide_is_accounted_too():
    job = started_running_since(0)

    plan = fail(job, at(30), "PodRejected", "the API server refused the job's pods")

    assert plan.status.goodput["trainingSeconds"] == 30.0


def test_the_gauges_extend_each_jobs_figures_to_the_scrape():
    job = live_job_through_one_preemption()
    unaccounted = make_job(name="new")
    collector = GoodputCollector()
    collector.jobs = lambda: [job, unaccounted]

    families = {family.name: family for family in collector.collect()}

    (ettr,) = families["rljob_job_ettr"].samples
    assert ettr.labels == {"namespace": "ns", "name": "grpo"}
    assert 93 / 131 < ettr.value < 1  # the job has been training since the status was written
    buckets = {s.labels["bucket"]: s.value for s in families["rljob_job_seconds"].samples}
    assert buckets["training"] > 93 and buckets["podStart"] == 22.0
    assert buckets["frameworkStart"] == 14.0 and buckets["productive"] == buckets["training"]


def unix(seconds: float) -> float:
    return at(seconds).timestamp()


def through_a_preemption_the_trainer_outlived(span=None):
    """preempted_at_112 (its trainer timed the first step at 19.4, Ready at 20); it finished
    its step on notice at 113.7; the new gang created at 114 from a look that read the ended
    attempt's progress record."""
    job = preempted_at_112()
    lookup = LookupResult(ResumeTarget("/checkpoints/global_step_31", 31), 31, trained=span)
    return with_status(job, decide(job, [], NODES, at(114), lookup).status)


def test_a_recovery_retimes_the_ended_attempt_to_the_steps_its_trainer_timed():
    """The step saved on notice, finished after the end was seen, is training, not pod start;
    the first step is where the trainer timed it, not the probe's second."""
    span = goodput.TrainedSpan.of(0, (unix(19.4), unix(113.7)))
    job = through_a_preemption_the_trainer_outlived(span)

    figures = job["status"]["goodput"]
    assert figures["trainingSeconds"] == 94.3  # 113.7 - 19.4
    assert figures["frameworkStartSeconds"] == 7.4  # 12 -> 19.4
    assert figures["podStartSeconds"] == 10.3  # 2 -> 12, and 113.7 -> 114
    assert job["status"]["lastEnd"]["trainedSince"].startswith(iso(at(20))[:-1])
    buckets = sum(figures[f"{b}Seconds"] for b in goodput.BUCKETS)
    assert abs(buckets - figures["wallSeconds"]) < 0.2


def test_a_progress_record_of_another_attempt_retimes_nothing():
    without = through_a_preemption_the_trainer_outlived()["status"]["goodput"]
    for attempt in (None, 1):
        span = goodput.TrainedSpan.of(attempt, (unix(19.4), unix(113.7)))
        figures = through_a_preemption_the_trainer_outlived(span)["status"]["goodput"]
        assert figures == without
    assert without["trainingSeconds"] == 92.0  # Ready at 20 -> seen ended at 112


def test_a_finished_job_is_retimed_by_its_trainers_termination_message():
    job = started_running_since(0)
    ended = stepped(job, phase="Succeeded", exit_code=0)
    said = progress.trained_line(unix(0.6), unix(250.4))
    ended[0]["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = said

    job = with_status(job, decide(job, ended, NODES, at(256)).status)

    figures = job["status"]["goodput"]
    assert job["status"]["phase"] == Phase.SUCCEEDED
    assert (figures["trainingSeconds"], figures["stoppingSeconds"]) == (249.8, 5.6)
    assert figures["frameworkStartSeconds"] == 0.6


def test_a_termination_message_out_of_the_attempts_time_is_not_believed():
    """A span before the attempt's gang, or after the pass, is another clock's: the Ready
    times stand."""
    job = started_running_since(0)
    for first, last in ((-30.0, 250.4), (0.6, 900.0)):
        ended = stepped(job, phase="Succeeded", exit_code=0)
        message = progress.trained_line(unix(first), unix(last))
        ended[0]["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = message
        figures = decide(job, ended, NODES, at(256)).status.goodput
        assert (figures["trainingSeconds"], figures["stoppingSeconds"]) == (256.0, 0.0)


def test_the_trained_line_reads_back_and_a_garbled_one_is_none():
    line = progress.trained_line(1765000123.4121, 1765000811.9)
    assert progress.parse_trained(f"some words\n{line}\n") == (1765000123.412, 1765000811.9)
    assert progress.parse_trained("rljob: trained from 20 to 10") is None  # out of order
    assert progress.parse_trained("rljob: trained from x to 10") is None
    assert progress.parse_trained("") is None


def test_the_step_clock_holds_the_first_and_the_latest_step():
    clock = progress.StepClock()
    assert clock.span is None and clock.fields() == {}
    clock.stepped()
    first = clock.first
    clock.stepped()
    assert clock.span == (first, clock.last) and clock.last >= first
    record = progress.progress_record(3, 1, progress.RUNNING, clock=clock)
    assert record[progress.FIRST_STEP_UNIX_TIME] == first
    assert record[progress.LAST_STEP_UNIX_TIME] == clock.last


def test_the_causes_add_up_to_the_wall_through_many_status_writes():
    """Each status write stores the figures and the next pass reads them back: what they
    are stored with must not drift from the wall, however many writes a job has."""
    figures = goodput.Goodput(since=at(0), as_of=at(0))
    moment = 0.0
    for write in range(60):
        moment += 0.37 + write % 7 * 0.013  # passes a fraction of a second apart
        figures = goodput.Goodput.from_dict(
            figures.advanced(goodput.BUCKETS[write % 5], at(moment)).to_dict()
        )
    causes = sum(figures[bucket] for bucket in goodput.BUCKETS)
    assert abs(causes - figures.wall) < 0.01
