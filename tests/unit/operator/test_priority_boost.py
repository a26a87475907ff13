"""Kueue's priority boost from the work at risk (reconcile.boost): the pure policy (pricing,
bounds, writes), its guards (guards: below the next class up, on the job's own Workload only),
what a pass reads for it (gate.BoostReads: the cache, the checkpoint folder once an
interval), what passes keep for the next (memory) and its plan of the write (decide)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import passes
import pytest
from builders import NOW
from rljob_operator import constants as c
from rljob_operator.api.reasons import EndKind, Phase
from rljob_operator.api.spec import PriorityBoostSpec, SpecError, parse_spec
from rljob_operator.api.status import JobStatus, Recovery
from rljob_operator.api.timestamps import iso, iso_precise
from rljob_operator.reconcile.boost.guards import Ceiling, ceiling, class_group, not_owned
from rljob_operator.reconcile.boost.memory import BoostMemory, Refusal, Remembered, SavedRead
from rljob_operator.reconcile.boost.pricing import (
    AtRisk,
    Saved,
    boost_for,
    gang_gpus,
    restart_seconds,
    saves_on_notice,
)
from rljob_operator.reconcile.boost.writes import (
    Written,
    annotation_value,
    next_write,
    parse_written,
)
from rljob_operator.reconcile.plan import Plan
from rljob_operator.reconcile.snapshot import job_ref
from rljob_operator.runtime.cache import ClusterCache

POLICY = PriorityBoostSpec(enabled=True, max_boost=100, gpu_seconds_per_point=3600,
                           min_step=5, min_interval_seconds=300)  # fmt: skip


def ago(seconds: float):
    return NOW - timedelta(seconds=seconds)


def spec_with(**fields):
    return parse_spec({"image": "trainer:1", **fields})


def recovery(attempt=1, detected=None, running=None):
    """A recovery record of `attempt`, detected and running `detected` and `running` seconds
    ago where given (a record the operator has not completed yet lacks them)."""
    return Recovery(
        attempt, EndKind.DISRUPTION, "PreemptionByScheduler",
        detected_at=iso_precise(ago(detected)) if detected is not None else "",
        first_running_at=iso_precise(ago(running)) if running is not None else None,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "gpus"),
    [
        ({"nnodes": 2, "resources": {"limits": {"nvidia.com/gpu": 8}}}, 16),
        ({"nnodes": 1, "resources": {"requests": {"amd.com/gpu": "4"}}}, 4),
        ({"nnodes": 3, "resources": {"limits": {"cpu": "2"}}}, 3),  # one per pod without GPUs
        ({"nnodes": 2}, 2),
    ],
)
def test_the_gang_holds_its_pods_gpus(fields, gpus):
    assert gang_gpus(spec_with(**fields)) == gpus


@pytest.mark.parametrize(
    ("risk", "unsaved"),
    [
        # progress.json gives steps since the checkpoint and the step time: they decide
        (AtRisk(8, ago(9000), ago(600), 100, 130, 20.0), 600.0),
        (AtRisk(8, ago(9000), ago(600), 100, 100, 20.0), 0.0),
        # no progress: the time since the newest checkpoint
        (AtRisk(8, ago(9000), ago(600), 100), 600.0),
        # a checkpoint older than the attempt (it resumed from it): since the gang ran
        (AtRisk(8, ago(120), ago(9000), 100), 120.0),
        (AtRisk(8, ago(120)), 120.0),  # nothing saved yet
        # progress older than the checkpoint (the last attempt's): time again
        (AtRisk(8, ago(9000), ago(60), 100, 90, 20.0), 60.0),
    ],
)
def test_unsaved_work_counts_steps_since_the_checkpoint_else_time_since_it(risk, unsaved):
    assert risk.unsaved_seconds(NOW) == pytest.approx(unsaved)
    assert risk.gpu_seconds(NOW) == pytest.approx(unsaved * risk.gpus)


@pytest.mark.parametrize(
    ("risk", "lost"),
    [
        # step 20 s + save 5 s fit the grace of 30 s: the trainer ends the step and saves it
        (AtRisk(8, ago(9000), ago(600), 100, 130, 20.0, 5.0, 30.0), 0.0),
        # only the save fits: rljob's trainer abandons the step in progress, at most one step
        (AtRisk(8, ago(9000), ago(600), 100, 130, 40.0, 10.0, 30.0, abandons_step=True), 40.0),
        (AtRisk(8, ago(9000), ago(600), 100, 100, 40.0, 10.0, 30.0, abandons_step=True), 0.0),
        # a framework that must end its step first: all the unsaved work
        (AtRisk(8, ago(9000), ago(600), 100, 130, 40.0, 10.0, 30.0), 1200.0),
        # the save alone does not fit, the save time is not measured, or no save on notice
        (AtRisk(8, ago(9000), ago(600), 100, 130, 20.0, 50.0, 30.0, abandons_step=True), 600.0),
        (AtRisk(8, ago(9000), ago(600), 100, 130, 20.0, None, 30.0), 600.0),
        (AtRisk(8, ago(9000), ago(600), 100, 130, 20.0, 5.0, None), 600.0),
    ],
)
def test_the_lost_work_counts_the_save_on_notice(risk, lost):
    assert risk.lost_work_seconds(NOW) == pytest.approx(lost)
    assert risk.gpu_seconds(NOW) == pytest.approx(lost * risk.gpus)


def test_a_big_gang_that_just_saved_is_no_cheap_victim_once_its_restart_counts():
    """64 GPUs that saved on notice in time still pay their restart on every GPU; one GPU
    with an hour unsaved and no save on notice loses less."""
    gang = AtRisk(64, ago(9000), NOW, 500, 500, 30.0, 10.0, 60.0, restart_seconds=300.0)
    small = AtRisk(1, ago(3600), restart_seconds=120.0)
    assert gang.gpu_seconds(NOW) == 64 * 300.0
    assert small.gpu_seconds(NOW) == pytest.approx(3600.0 + 120.0)
    assert boost_for(gang.gpu_seconds(NOW), POLICY) > boost_for(small.gpu_seconds(NOW), POLICY)
    assert not gang.grows(NOW) and small.grows(NOW)  # a save on notice caps the gang's


def test_the_restart_time_is_the_median_of_the_jobs_measured_recoveries():
    assert restart_seconds(JobStatus()) == 0.0
    status = JobStatus(recoveries=(recovery(1, 1000, 900), recovery(2, 800, 760),
                                   recovery(3, 500, 200), recovery(4, 50)))  # fmt: skip
    assert restart_seconds(status) == pytest.approx(100.0)


@pytest.mark.parametrize(
    ("spec", "status", "saves"),
    [
        ({}, {}, True),  # rljob's own trainer
        ({"framework": "verl", "command": ["python"]}, {}, True),
        ({"framework": "verl", "command": ["python"], "saveOnNotice": False}, {}, False),
        ({"framework": "verl", "command": ["python"], "ray": {"saveOnNotice": False}}, {}, False),
        ({"framework": "trl", "command": ["python", "t.py"]}, {}, True),
        ({"framework": "trl", "command": ["python", "t.py"], "saveOnNotice": False}, {}, False),
        ({"framework": "rlinf", "command": ["python"]},
         {"conditions": [{"type": "SaveOnNotice", "status": "False"}]}, False),
        ({"framework": "custom", "command": ["python"]}, {}, False),
    ],
)  # fmt: skip
def test_who_saves_on_notice(spec, status, saves):
    assert saves_on_notice(spec_with(**spec), JobStatus.from_dict(status)) is saves


def test_a_lost_work_that_does_not_grow_wakes_only_for_the_recheck():
    """Growth 0: the boost moves only when a save or the restart time changes it."""
    decided = next_write(8 * 300.0, 0, Written(), NOW, POLICY)
    assert decided.value is None and decided.wake_after is None  # 0 points: nothing to write
    decided = next_write(8 * 3600.0 * 10, 0, Written(), NOW, POLICY)
    assert decided.value == 80 and decided.wake_after == POLICY.min_interval_seconds


@pytest.mark.parametrize(
    ("gpu_seconds", "boost"),
    [
        (0, 0),
        (-5, 0),
        (float("nan"), 0),
        (3599, 0),
        (3600, 1),
        (8 * 3600 * 2.5, 20),
        (10**9, 100),  # clamped to maxBoost
        (float("inf"), 0),
    ],
)
def test_the_boost_is_floor_of_gpu_hours_at_risk_clamped_to_0_and_max(gpu_seconds, boost):
    assert boost_for(gpu_seconds, POLICY) == boost


def test_a_boost_below_the_class_gap_never_lifts_a_job_over_a_higher_class():
    """Kueue lets Z preempt X when Z's priority + boost > X's priority + boost: with maxBoost
    below the gap, the most boosted low job still loses to an unboosted high one."""
    low, high = 100, 1000
    policy = PriorityBoostSpec(enabled=True, max_boost=high - low - 1)
    assert low + boost_for(10**12, policy) < high


H = 3600.0  # GPU-seconds per point


@pytest.mark.parametrize(
    ("gpu_seconds", "written", "value", "wake"),
    [
        # never written, nothing at risk: nothing to write; look when 5 points are at risk
        (0.0, Written(), None, 5 * H / 8),
        # never written, 7 points: write, look again after the interval
        (7 * H, Written(), 7, 300),
        # moved by less than minStep: held; a boost above 0 is looked at every interval
        (9 * H, Written(7, ago(1000)), None, 300),
        # moved by minStep but inside the interval: held until the interval ends
        (12 * H, Written(7, ago(100)), None, 200),
        # moved by minStep after the interval: written
        (12 * H, Written(7, ago(1000)), 12, 300),
        # a save brought it to 0: an edge, written even though the step is small; then
        # nothing to look at until 5 points are at risk again
        (0.0, Written(3, ago(1000)), 0, 5 * H / 8),
        # at maxBoost: written though the step is small; then only the re-check for saves
        (1000 * H, Written(98, ago(1000)), 100, 300),
        (1000 * H, Written(100, ago(1000)), None, 300),
        # unchanged at 0 (after a save): no write, nothing to look at until it grows
        (0.5 * H, Written(0, ago(1000)), None, 4.5 * H / 8),
    ],
)
def test_writes_only_on_a_step_and_at_most_once_per_interval(gpu_seconds, written, value, wake):
    decided = next_write(gpu_seconds, 8, written, NOW, POLICY)
    assert decided.value == value
    assert decided.wake_after == pytest.approx(wake)


def test_an_idle_job_with_its_boost_written_asks_for_nothing_but_the_recheck():
    """A run of passes with the work at risk unchanged writes once, then never again."""
    written, writes = Written(), 0
    for minute in range(60):
        now = NOW + timedelta(minutes=minute)
        decided = next_write(20 * H, 8, written, now, POLICY)
        if decided.value is not None:
            writes += 1
            written = Written(decided.value, now)
    assert writes == 1 and written.value == 20


def test_the_annotation_is_kueues_signed_integer_and_reads_back():
    assert annotation_value(0) == "0" and annotation_value(42) == "42"
    read = parse_written({"b": "42", "t": "2026-11-29T12:00:00Z"}, "b", "t")
    assert read == Written(42, NOW)
    assert parse_written({"b": "", "t": "yesterday"}, "b", "t") == Written()


@pytest.mark.parametrize(
    ("boost", "field"),
    [
        ({"enabled": "yes"}, "spec.queueing.priorityBoost.enabled"),
        ({"maxBoost": -1}, "spec.queueing.priorityBoost.maxBoost"),
        ({"maxBoost": 2_000_000}, "spec.queueing.priorityBoost.maxBoost"),
        ({"gpuSecondsPerPoint": 0}, "spec.queueing.priorityBoost.gpuSecondsPerPoint"),
        ({"minStep": 0}, "spec.queueing.priorityBoost.minStep"),
        ({"minIntervalSeconds": 0}, "spec.queueing.priorityBoost.minIntervalSeconds"),
    ],
)
def test_a_bad_boost_spec_names_its_field(boost, field):
    with pytest.raises(SpecError) as raised:
        spec_with(queueing={"priorityBoost": boost})
    assert raised.value.field == field


def test_the_boost_is_off_by_default_while_kueues_gate_is_alpha():
    assert spec_with().queueing.priority_boost == PriorityBoostSpec(enabled=False)
    on = spec_with(queueing={"priorityBoost": {"enabled": True, "maxBoost": 50}})
    assert on.queueing.priority_boost.enabled and on.queueing.priority_boost.max_boost == 50


# ---------------------------------------------------------------- the writer's plan
BOOST, STAMP = c.KUEUE_PRIORITY_BOOST_ANNOTATION, c.PRIORITY_BOOST_TIME_ANNOTATION


class Finder:
    """Stands in for CheckpointFinder.saved: what the job's folder says."""

    def __init__(self, saved):
        self.saved_state, self.looks = saved, 0

    def saved(self, spec):
        self.looks += 1
        return self.saved_state


def queued_job(enabled=True, **boost):
    job = {
        "metadata": {"name": "grpo", "namespace": "ns", "labels": {c.KUEUE_QUEUE_LABEL: "team"},
                     "resourceVersion": "5"},
        "spec": {"image": "trainer:1", "nnodes": 2, "resources": {"limits": {"nvidia.com/gpu": 4}},
                 "queueing": {"priorityBoost": {"enabled": enabled, "gpuSecondsPerPoint": 100,
                                                "minIntervalSeconds": 10, **boost}}},
    }  # fmt: skip
    return job


def running_status(attempt=1, since=600):
    return JobStatus(Phase.RUNNING, attempt, recoveries=(recovery(attempt, running=since),))


def gang(attempt=1, nnodes=2):
    """The job's trainer pods of `attempt`, as the cache holds them."""
    return [{"metadata": {"namespace": "ns", "name": f"grpo-a{attempt}-n{i}",
                          "uid": f"uid-a{attempt}-n{i}",
                          "labels": {c.LABEL_JOB: "grpo", c.LABEL_ATTEMPT: str(attempt),
                                     c.LABEL_ROLE: c.ROLE_TRAINER}}}
            for i in range(nnodes)]  # fmt: skip


def owner_refs(pods):
    """Kueue's owner references of a pod group's Workload: every pod of the group."""
    return [{"apiVersion": "v1", "kind": "Pod", "name": p["metadata"]["name"],
             "uid": p["metadata"]["uid"]} for p in pods]  # fmt: skip


def workload(name="grpo-a1", revision="7", owners=None, spec=None, **annotations):
    """The Kueue Workload of a pod group; owned by the job's gang of that attempt unless
    `owners` says otherwise."""
    if owners is None:
        owners = owner_refs(gang(int(name.rsplit("-a", 1)[1])))
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": revision,
                         "annotations": annotations, "ownerReferences": owners},
            "spec": spec or {"priority": 0},
            "status": {"conditions": [{"type": "QuotaReserved", "status": "True"}]}}  # fmt: skip


# An administrator without floors: the jobs' own minIntervalSeconds and gpuSecondsPerPoint.
NO_FLOORS = {"min_boost_interval_seconds": 1, "min_gpu_seconds_per_point": 1}


def plan_boost_write(plan, job, finder, cache, now, limit=100, pods=None, memory=None, **floors):
    """A pass's boost plan, with the job's gang of the plan's attempt unless `pods` is given,
    what earlier passes kept in `memory` (nothing unless given), under the administrator's
    `floors` (none unless given)."""
    pods = gang(plan.status.attempt) if pods is None else pods
    memory = BoostMemory() if memory is None else memory
    passes.plan_boost_write(plan, job, finder, cache, memory, now, limit, pods,
                            **(NO_FLOORS | floors))  # fmt: skip


def listed_classes(cache, **classes):
    """The operator's full lists of both groups of priority classes, as its relist makes them:
    `classes` by group, none where not given."""
    for group in c.PRIORITY_CLASS_KINDS:
        items = [{"metadata": {"name": name, "resourceVersion": "1"}, "value": value}
                 for name, value in classes.get(group, {}).items()]  # fmt: skip
        cache.replace_priority_classes(group, items, "1")
    return cache


def cache_with(*workloads):
    """A cache holding `workloads`, the classes listed (none)."""
    cache = listed_classes(ClusterCache())
    for w in workloads:
        cache.on_admission("ADDED", w)
    return cache


def test_the_plan_writes_the_boost_of_the_running_attempts_workload_and_wakes_for_the_next():
    # 8 GPUs, steps 100..130 finished after the checkpoint at 100, 20 s a step: 600 s x 8
    saved = Saved(100, ago(900), 130, 20.0)
    plan = Plan(status=running_status())
    cache, memory = cache_with(workload()), BoostMemory()
    plan_boost_write(plan, queued_job(), Finder(saved), cache, NOW, memory=memory)
    assert plan.annotate_workload[:2] == ("grpo-a1", {BOOST: "48", STAMP: iso_precise(NOW)})
    assert plan.requeue_after == 0  # to record the write once the API server took it
    cache.on_admission(None, workload(revision="8", **plan.annotate_workload[1]))
    plan = Plan(status=running_status())
    plan_boost_write(plan, queued_job(), Finder(saved), cache, NOW, memory=memory)
    assert plan.annotate_workload is None
    assert plan.requeue_after == 10  # the interval: a save may lower it


class WorkloadWriter:
    """Stands in for the Kube of reconcile.act: stores the job's status, and takes or refuses
    (`refuse`: the API server's status code) the Workload's annotations."""

    def __init__(self, stored_workload, refuse=None):
        self.workload, self.refuse, self.status_writes = stored_workload, refuse, []

    def patch_status(self, namespace, name, patch, revision):
        self.status_writes.append(patch)
        self.job = dict(self.job, status={**self.job.get("status", {}), **patch},
                        metadata={**self.job["metadata"], "resourceVersion": str(int(revision) + 1)})  # fmt: skip
        return self.job

    def annotate_kueue_workload(self, namespace, name, annotations):
        from kubernetes.client.exceptions import ApiException
        from rljob_operator.kube import KubeError

        if self.refuse:
            raise KubeError(f"annotate Kueue Workload {namespace}/{name}",
                            ApiException(status=self.refuse, reason="Forbidden"))  # fmt: skip
        meta = self.workload["metadata"]
        self.workload = {**self.workload, "metadata": {
            **meta, "annotations": {**meta["annotations"], **annotations},
            "resourceVersion": str(int(meta["resourceVersion"]) + 1)}}  # fmt: skip
        return self.workload


def boost_passes(status, saved, refuse=None, count=2):
    """`count` passes of a job whose status is `status` and whose folder says `saved`, each
    carried out by reconcile.act against a WorkloadWriter, with one cache and one boost
    memory: the statuses they stored, the writer and the last plan."""
    from rljob_operator.reconcile import act

    job, cache = {**queued_job(), "status": status.to_dict()}, cache_with(workload())
    memory = BoostMemory()
    writer = WorkloadWriter(workload(), refuse)
    writer.job = job
    stored, plan = [], None
    for _ in range(count):
        plan = Plan(status=JobStatus.from_dict(writer.job.get("status")))
        plan_boost_write(plan, writer.job, Finder(saved), cache, NOW, memory=memory)
        act.apply(writer, cache, memory, writer.job, plan, lambda *event: None)
        stored.append(JobStatus.from_dict(writer.job.get("status")))
    return stored, writer, plan


def test_the_status_records_a_boost_once_the_workload_carries_it_with_what_it_came_from():
    # 8 GPUs, step 20 s and save 5 s fit the default grace of 30 s: only the restart counts
    status = replace(running_status(), recoveries=(recovery(1, detected=900, running=600),))
    (first, second), writer, _ = boost_passes(status, Saved(100, ago(900), 130, 20.0, 5.0))
    assert writer.workload["metadata"]["annotations"][BOOST] == "24"  # 8 x 300 s / 100
    assert first.priority_boost is None  # stored before the Workload was written
    assert second.priority_boost.to_dict() == {
        "boost": 24, "atRiskGpuSeconds": 2400.0, "gpus": 8, "lostWorkSeconds": 0.0,
        "restartSeconds": 300.0, "time": iso_precise(NOW),
    }  # fmt: skip


def test_a_boost_the_api_server_refused_is_never_recorded_in_the_status():
    stored, writer, plan = boost_passes(running_status(), Saved(100, ago(900), 130, 20.0),
                                        refuse=403)  # fmt: skip
    assert BOOST not in writer.workload["metadata"]["annotations"]
    assert [s.priority_boost for s in stored] == [None, None]
    condition = next(x for x in stored[-1].conditions if x["type"] == "PriorityBoost")
    assert (condition["status"], condition["reason"]) == ("False", "BoostWriteRefused")
    assert "403 Forbidden" in condition["message"]
    assert plan.annotate_workload is None  # the second pass waits out the back-off


def test_time_since_the_checkpoint_counts_without_progress_and_a_fresh_save_writes_zero():
    plan = Plan(status=running_status())
    plan_boost_write(plan, queued_job(), Finder(Saved(40, ago(300))), cache_with(workload()), NOW)
    assert plan.annotate_workload[1][BOOST] == "24"  # 300 s x 8 GPUs / 100
    cache = cache_with(workload(**{BOOST: "24", STAMP: iso_precise(ago(60))}))
    plan = Plan(status=running_status())
    plan_boost_write(plan, queued_job(), Finder(Saved(50, NOW, 50, 20.0)), cache, NOW)
    assert plan.annotate_workload[1][BOOST] == "0"


@pytest.mark.parametrize(
    ("job", "status", "cached", "saved"),
    [
        (queued_job(enabled=False), running_status(), workload(), Saved(1, ago(900))),
        (
            queued_job(),
            replace(running_status(), phase=Phase.PENDING),
            workload(),
            Saved(1, ago(900)),
        ),
        (queued_job(), running_status(), workload(name="grpo-a0"), Saved(1, ago(900))),
        (queued_job(), running_status(), workload(), None),  # the volume is not the operator's
    ],
    ids=["off", "not-running", "no-workload-of-the-attempt", "no-local-volume"],
)
def test_no_boost_is_written_when_off_pending_unknown_or_unreadable(job, status, cached, saved):
    plan = Plan(status=status)
    finder = Finder(saved)
    plan_boost_write(plan, job, finder, cache_with(cached), NOW)
    assert plan.annotate_workload is None and plan.requeue_after is None


def test_a_job_not_in_a_queue_reads_no_checkpoints():
    job = queued_job()
    job["metadata"]["labels"] = {}
    finder = Finder(Saved(1, ago(900)))
    plan_boost_write(Plan(status=running_status()), job, finder, cache_with(workload()), NOW)
    assert finder.looks == 0


def test_an_unchanged_boost_inside_its_interval_is_not_written_again():
    cache = cache_with(workload(**{BOOST: "24", STAMP: iso_precise(ago(3))}))
    plan = Plan(status=running_status())
    plan_boost_write(plan, queued_job(), Finder(Saved(40, ago(300))), cache, NOW)
    assert plan.annotate_workload is None and plan.requeue_after == 10


def boost_condition_of(plan):
    found = [x for x in plan.status.conditions if x["type"] == "PriorityBoost"]
    return (found[0]["status"], found[0]["reason"]) if found else None


@pytest.mark.parametrize(
    ("asked", "limit", "written", "condition"),
    [
        (None, 100, "48", ("True", "Boosting")),  # maxBoost unset: the administrator's limit
        (None, 30, "30", ("True", "Boosting")),
        (500, 30, "30", ("True", "BoostClamped")),  # the job asks for more: clamped, and said
        (20, 30, "20", ("True", "Boosting")),  # the job's own lower cap holds
    ],
)
def test_the_boost_never_goes_above_the_administrators_limit(asked, limit, written, condition):
    """600 s x 8 GPUs at risk / 100 a point = 48 points, wanted."""
    boost = {} if asked is None else {"maxBoost": asked}
    plan = Plan(status=running_status())
    plan_boost_write(plan, queued_job(**boost), Finder(Saved(100, ago(900), 130, 20.0)),
                     cache_with(workload()), NOW, limit=limit)  # fmt: skip
    assert plan.annotate_workload[1][BOOST] == written
    assert boost_condition_of(plan) == condition


FLOORS = {"min_boost_interval_seconds": 60, "min_gpu_seconds_per_point": 100}


def test_the_administrators_floors_raise_a_jobs_interval_and_scale_and_the_job_says_so():
    """The author asks for a point per GPU-second and a look every second: 600 s x 8 GPUs at
    risk would be 4,800 points, the limit at once. Under the floors (60 s, 100 GPU-seconds a
    point) it is 48 points, and the folder is read and the Workload written once a minute,
    however often passes come."""
    job = queued_job(gpuSecondsPerPoint=1, minIntervalSeconds=1)
    finder, cache = Finder(Saved(100, ago(900), 130, 20.0)), cache_with(workload())
    memory, plans = BoostMemory(), []
    for second in range(121):  # a pass a second for two minutes
        now = NOW + timedelta(seconds=second)
        plan = Plan(status=running_status())
        plan_boost_write(plan, job, finder, cache, now, memory=memory, **FLOORS)
        if plan.annotate_workload:  # as the API server would take it
            meta = cache.kueue("ns", "grpo-a1").workload["metadata"]
            cache.on_admission(None, workload(revision=str(int(meta["resourceVersion"]) + 1),
                                              **plan.annotate_workload[1]))  # fmt: skip
        plans.append(plan)
    assert plans[0].annotate_workload[1][BOOST] == "48"
    assert finder.looks == 3  # at 0, 60 and 120 s
    assert sum(1 for p in plans if p.annotate_workload) <= 3
    condition = next(x for x in plans[-1].status.conditions if x["type"] == "PriorityBoost")
    assert (condition["status"], condition["reason"]) == ("True", "BoostPolicyRaised")
    assert condition["message"].endswith(
        "; spec.queueing.priorityBoost.minIntervalSeconds 1 and gpuSecondsPerPoint 1 are below "
        "the operator's floors: 60 and 100 apply"
    )


@pytest.mark.parametrize(
    ("boost", "condition", "raised"),
    [
        ({}, ("True", "Boosting"), None),  # the spec's 100 a point and 10 s: above the floors
        ({"minIntervalSeconds": 60, "gpuSecondsPerPoint": 100}, ("True", "Boosting"), None),
        ({"minIntervalSeconds": 59}, ("True", "BoostPolicyRaised"), "minIntervalSeconds 59"),
        ({"maxBoost": 500}, ("True", "BoostClamped"), None),  # the limit's clamp goes first
        ({"maxBoost": 500, "gpuSecondsPerPoint": 1}, ("True", "BoostClamped"),
         "gpuSecondsPerPoint 1"),  # and the floor is said too
    ],
)  # fmt: skip
def test_a_field_below_a_floor_is_said_whatever_else_the_condition_says(boost, condition, raised):
    job = queued_job(**{"minIntervalSeconds": 100, "gpuSecondsPerPoint": 200, **boost})
    plan = Plan(status=running_status())
    plan_boost_write(plan, job, Finder(Saved(100, ago(900), 130, 20.0)), cache_with(workload()),
                     NOW, **FLOORS)  # fmt: skip
    assert boost_condition_of(plan) == condition
    message = next(x for x in plan.status.conditions if x["type"] == "PriorityBoost")["message"]
    assert ("below the operator's floor" in message) == (raised is not None)
    assert raised is None or f"spec.queueing.priorityBoost.{raised} is below" in message


def test_the_operator_refuses_floors_below_1():
    import argparse

    from rljob_operator import operator_cli

    parser = argparse.ArgumentParser()
    operator_cli.register(parser.add_subparsers())
    args = parser.parse_args(["operator", "--min-boost-interval-seconds", "300",
                              "--min-gpu-seconds-per-point", "600"])  # fmt: skip
    assert (args.min_boost_interval_seconds, args.min_gpu_seconds_per_point) == (300, 600)
    defaults = parser.parse_args(["operator"])
    assert (defaults.min_boost_interval_seconds, defaults.min_gpu_seconds_per_point) == (60, 60)
    with pytest.raises(SystemExit):
        parser.parse_args(["operator", "--min-boost-interval-seconds", "0"])


def test_a_boost_is_held_at_0_while_the_priority_classes_cannot_be_listed_and_the_job_says_why():
    """Without the classes the operator cannot know the next class above the job: a boost on
    the Workload goes to 0, none is written, until a list of both groups succeeds."""
    finder = Finder(Saved(100, ago(900), 130, 20.0))  # 48 points wanted
    cache = cache_with(workload(spec=of_class(100), **{BOOST: "30", STAMP: iso_precise(ago(60))}))
    cache.priority_classes_unlisted(PC, "list priorityclasses.scheduling.k8s.io: 403 forbidden")
    memory, plan = BoostMemory(), Plan(status=running_status())
    plan_boost_write(plan, queued_job(), finder, cache, NOW, memory=memory)
    assert plan.annotate_workload[1][BOOST] == "0"
    condition = next(x for x in plan.status.conditions if x["type"] == "PriorityBoost")
    assert (condition["status"], condition["reason"]) == ("False", "BoostCeilingUnknown")
    assert (
        "PriorityClasses: list priorityclasses.scheduling.k8s.io: 403 forbidden"
        in (condition["message"])
    )
    listed_classes(cache, **{WPC: {"low": 100, "high": 1000}})  # the next relist succeeds
    plan = Plan(status=running_status())
    plan_boost_write(plan, queued_job(), finder, cache, NOW + timedelta(seconds=20), memory=memory)
    assert plan.annotate_workload[1][BOOST] == "48"
    assert boost_condition_of(plan) == ("True", "Boosting")


def test_an_operator_that_has_not_listed_the_classes_writes_no_boost():
    cache = ClusterCache()  # the watches may have brought some, but no full list came yet
    cache.on_admission("ADDED", workload(spec=of_class(100)))
    cache.on_priority_class(WPC, "ADDED", {"metadata": {"name": "high", "resourceVersion": "1"},
                                           "value": 1000})  # fmt: skip
    plan = Plan(status=running_status())
    plan_boost_write(plan, queued_job(), Finder(Saved(100, ago(900), 130, 20.0)), cache, NOW)
    assert plan.annotate_workload is None  # 0 wanted, none on the Workload
    assert boost_condition_of(plan) == ("False", "BoostCeilingUnknown")
    assert cache.priority_classes_unknown() == (
        "WorkloadPriorityClasses not listed yet; PriorityClasses not listed yet"
    )


def test_a_failed_list_makes_a_group_unknown_until_a_list_succeeds_and_unserved_is_known():
    cache = listed_classes(ClusterCache(), **{PC: {"urgent": 5000}})
    assert cache.priority_classes_unknown() is None
    cache.priority_classes_unlisted(WPC, "403 forbidden")
    assert cache.priority_classes_unknown() == "WorkloadPriorityClasses: 403 forbidden"
    assert cache.priority_classes()[PC] == {"urgent": 5000}  # kept, but not enough
    cache.replace_priority_classes(WPC, [], "")  # a cluster that serves no Kueue API
    assert cache.priority_classes_unknown() is None


def test_an_operator_that_allows_no_boost_writes_none_reads_nothing_and_says_so():
    finder = Finder(Saved(100, ago(900), 130, 20.0))
    plan = Plan(status=running_status())
    plan_boost_write(plan, queued_job(), finder, cache_with(workload()), NOW, limit=0)
    assert plan.annotate_workload is None and finder.looks == 0
    assert boost_condition_of(plan) == ("False", "BoostNotAllowed")


def test_a_refused_write_waits_out_a_doubling_back_off_and_the_condition_says_why():
    cache, memory = cache_with(workload()), BoostMemory()
    memory.keep_refusal(job_ref(queued_job()), Refusal(ago(30), 1, "403 Forbidden"))
    finder = Finder(Saved(100, ago(900), 130, 20.0))
    plan = Plan(status=running_status())
    plan_boost_write(plan, queued_job(), finder, cache, NOW, memory=memory)
    assert plan.annotate_workload is None and finder.looks == 0
    assert plan.requeue_after == pytest.approx(30)  # the first back-off is 60 s
    assert boost_condition_of(plan) == ("False", "BoostWriteRefused")
    assert "403 Forbidden" in plan.status.conditions[0]["message"]
    memory.keep_refusal(job_ref(queued_job()), Refusal(ago(61), 1, "403 Forbidden"))  # due
    plan = Plan(status=running_status())
    plan_boost_write(plan, queued_job(), finder, cache, NOW, memory=memory)
    assert plan.annotate_workload[1][BOOST] == "48"
    assert [Refusal(NOW, n, "x").retry_at() - NOW for n in (1, 2, 3, 7, 40)] == [
        timedelta(seconds=s) for s in (60, 120, 240, 3600, 3600)
    ]


def test_the_folder_is_read_once_per_interval_and_attempt_however_often_passes_come():
    finder, cache = Finder(Saved(40, ago(300))), cache_with(workload(), workload("grpo-a2"))
    memory, job = BoostMemory(), queued_job()  # minIntervalSeconds 10

    def one_pass(seconds, attempt=1):
        plan = Plan(status=running_status(attempt))
        plan_boost_write(plan, job, finder, cache, NOW + timedelta(seconds=seconds), memory=memory)

    for seconds in (0, 1, 9.9):
        one_pass(seconds)
    assert finder.looks == 1
    one_pass(10)
    assert finder.looks == 2  # the interval is over
    one_pass(11, attempt=2)
    assert finder.looks == 3  # a new attempt


def test_the_reconciler_forgets_a_job_that_is_gone():
    from rljob_operator.reconcile.run import Reconciler

    cache = ClusterCache()
    reconciler = Reconciler(kube=None, cache=cache, finder=None, tell=lambda *event: None)
    job = {"metadata": {"namespace": "ns", "name": "grpo", "uid": "u1", "resourceVersion": "1"}}
    cache.on_job(None, job)
    reconciler.boost_memory.keep_refusal(job_ref(job), Refusal(NOW, 1, "403"))
    cache.on_job("DELETED", {**job, "metadata": {**job["metadata"], "resourceVersion": "2"}})
    assert reconciler.reconcile("ns", "grpo") is None  # the pass finds it gone
    assert reconciler.boost_memory.recall(job_ref(job)).refusal is None


def test_a_job_made_again_under_its_name_starts_with_a_clean_boost_memory():
    """Whether or not a pass saw the old job gone: its memory is kept for its uid."""
    memory = BoostMemory()
    old = {"metadata": {"namespace": "ns", "name": "grpo", "uid": "u1"}}
    new = {"metadata": {**old["metadata"], "uid": "u2"}}
    memory.keep_refusal(job_ref(old), Refusal(NOW, 1, "403"))
    memory.keep_read(job_ref(old), SavedRead(1, NOW, Saved(40, ago(300))))
    assert memory.recall(job_ref(new)) == Remembered("u2")
    assert memory.recall(job_ref(old)).refusal == Refusal(NOW, 1, "403")


def boost_annotations(cache, pod_group):
    """The boost's annotations on the pod group's Workload as the cache keeps it ({} for none);
    None while the cache holds no such Workload."""
    kept = cache.kueue("ns", pod_group).workload
    return None if kept is None else kept["metadata"]["annotations"]


def test_the_cache_keeps_the_boost_wakes_on_a_new_workload_only_and_never_goes_back():
    cache = ClusterCache()
    cache.on_job(None, {"metadata": {"namespace": "ns", "name": "grpo", "resourceVersion": "1"}})
    assert boost_annotations(cache, "grpo-a0") is None
    assert cache.on_admission("ADDED", workload("grpo-a0", "7")) == ("ns", "grpo")
    assert boost_annotations(cache, "grpo-a0") == {}
    written = workload("grpo-a0", "9", **{BOOST: "3", STAMP: iso(NOW), "other": "x"})
    assert cache.on_admission(None, written) is None  # rljob's own write wakes nothing
    assert boost_annotations(cache, "grpo-a0") == {BOOST: "3", STAMP: iso(NOW)}
    cache.on_admission("MODIFIED", workload("grpo-a0", "8"))  # a late event of before
    assert boost_annotations(cache, "grpo-a0")[BOOST] == "3"
    cache.on_admission("DELETED", workload("grpo-a0", "10"))
    assert boost_annotations(cache, "grpo-a0") is None


def test_the_finder_reads_the_newest_complete_checkpoint_and_progress_of_a_local_volume(tmp_path):
    from rljob_contract.manifest import write_manifest
    from rljob_operator.reconcile.lookup.finder import CheckpointFinder

    folder = tmp_path / "run" / "global_step_20"
    (folder / "actor").mkdir(parents=True)
    (folder / "actor" / "__0_0.distcp").write_bytes(b"weights")
    (folder / "actor" / ".metadata").write_bytes(b"metadata")
    write_manifest(folder, step=20, world_size=1)
    (tmp_path / "run" / "global_step_30" / "actor").mkdir(parents=True)  # torn: passed over
    (tmp_path / "run" / "progress.json").write_text('{"step": 27, "step_seconds": 0.5}')
    spec = spec_with(checkpoint={"volume": {"persistentVolumeClaim": {"claimName": "ckpts"}},
                                 "directory": "run"})  # fmt: skip
    saved = CheckpointFinder({"ckpts": tmp_path}, "inspector:1").saved(spec)
    assert (saved.step, saved.finished_step, saved.step_seconds) == (20, 27, 0.5)
    assert saved.at is not None and saved.at.tzinfo is not None
    assert CheckpointFinder({}, "inspector:1").saved(spec) is None  # only an inspector could
    empty = spec_with(checkpoint={"volume": {"persistentVolumeClaim": {"claimName": "ckpts"}},
                                  "directory": "none-yet"})  # fmt: skip
    assert CheckpointFinder({"ckpts": tmp_path}, "inspector:1").saved(empty) == Saved()


# ---------------------------------------------------------------- the guards
WPC, PC = "kueue.x-k8s.io", "scheduling.k8s.io"
CLASSES = {WPC: {"low": 100, "mid": 150, "high": 1000}, PC: {"urgent": 5000}}


def pod_ref(name):
    """An owner reference to a pod that is not the job's."""
    return {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": f"uid-{name}"}


def of_class(priority, group=WPC, name="low"):
    """A Workload's spec of `priority` from a class of `group` (v1beta2's priorityClassRef)."""
    kind = {WPC: "WorkloadPriorityClass", PC: "PriorityClass"}[group]
    return {"priority": priority, "priorityClassRef": {"group": group, "kind": kind, "name": name}}


@pytest.mark.parametrize(
    ("spec", "boost", "above"),
    [
        (of_class(100), 49, "mid"),  # 150 - 100 - 1
        (of_class(150, name="mid"), 849, "high"),
        (of_class(900, name="custom"), 99, "high"),  # a priority between the classes
        (of_class(1000, name="high"), 3999, "urgent"),  # a PriorityClass above it counts
        (of_class(5000, PC, "urgent"), None, None),  # no class of either source above
        (of_class(149), 0, "mid"),  # right below the next class: no room at all
        (of_class(100, PC), 49, "mid"),  # a pod-priority job under Kueue's class mid
        (of_class(1100, PC), 3899, "urgent"),
        ({"priority": 0}, 99, "low"),  # no class named: Kueue took the pods' priority
        ({}, 99, "low"),  # no priority either: Kueue's 0
        (
            {
                "priority": 100,
                "priorityClassSource": "kueue.x-k8s.io/workloadpriorityclass",
                "priorityClassName": "low",
            },
            49,
            "mid",
        ),  # v1beta1's fields
    ],
)
def test_the_ceiling_is_one_below_the_gap_to_the_next_class_of_either_source(spec, boost, above):
    top = ceiling({"metadata": {}, "spec": spec}, CLASSES)
    assert (top and (top.boost, top.name)) == ((boost, above) if above else None)


def test_a_boost_at_the_ceiling_leaves_the_job_preemptible_by_the_next_class():
    """Kueue's SatisfiesPreemptionPolicy (LowerPriority): the preemptor's effective priority
    must be strictly higher than the candidate's (priority + boost)."""
    for priority in (0, 100, 120, 149, 150, 999):
        top = ceiling({"spec": of_class(priority)}, CLASSES)
        if top is None:
            continue
        assert priority + top.boost < top.value  # the next class still preempts
        assert priority + top.boost + 1 == top.value or top.boost == 0


def test_the_class_source_reads_v1beta2s_ref_then_v1beta1s_source_else_the_pods():
    assert class_group({"spec": of_class(1)}) == WPC
    assert class_group({"spec": of_class(1, PC)}) == PC
    v1beta1 = {"priorityClassSource": "kueue.x-k8s.io/workloadpriorityclass"}
    assert class_group({"spec": v1beta1}) == WPC
    assert class_group({"spec": {}}) == PC


@pytest.mark.parametrize(
    ("owners", "why"),
    [
        (owner_refs(gang(1)), None),
        (owner_refs(gang(1)[:1]), None),  # one of the gang's pods (Kueue adds the others)
        ([], "it has no owner"),
        ([*owner_refs(gang(1)), pod_ref("intruder")], "its owner Pod intruder (uid uid-intruder)"),
        (owner_refs(gang(0)), "its owner Pod grpo-a0-n0"),  # the last attempt's pods
        (
            [{"apiVersion": "batch/v1", "kind": "Job", "name": "grpo-a1", "uid": "uid-a1-n0"}],
            "its owner Job grpo-a1",
        ),  # same uid, not a pod
    ],
    ids=[
        "the-gang",
        "one-of-the-gang",
        "no-owner",
        "a-foreign-pod-joined",
        "another-attempt",
        "not-a-pod",
    ],
)
def test_a_workload_is_the_jobs_only_where_every_owner_is_a_pod_of_its_attempt(owners, why):
    found = not_owned(workload(owners=owners), gang(0) + gang(1), 1)
    assert found is None if why is None else why in found


def test_the_boost_is_clamped_below_the_next_class_and_the_condition_names_it():
    """600 s x 8 GPUs at risk / 100 a point = 48 points wanted; the job's class low (100) with
    mid at 130 next above it allows at most 29, and the condition says why. The classes come
    from the cache, as the watches deliver them."""
    cache = cache_with(workload(spec=of_class(100)))
    for name, value in {"low": 100, "mid": 130, "high": 1000}.items():
        cache.on_priority_class(WPC, "ADDED", {"metadata": {"name": name, "resourceVersion": "1"},
                                              "value": value})  # fmt: skip
    memory, plan = BoostMemory(), Plan(status=running_status())
    plan_boost_write(plan, queued_job(), Finder(Saved(100, ago(900), 130, 20.0)), cache, NOW,
                     memory=memory)  # fmt: skip
    assert plan.annotate_workload[1][BOOST] == "29"
    condition = next(x for x in plan.status.conditions if x["type"] == "PriorityBoost")
    assert (condition["status"], condition["reason"]) == ("True", "BoostClamped")
    assert (
        "below WorkloadPriorityClass mid (130), the next class above the job's 100"
        in (condition["message"])
    )
    # The class goes: the boost follows the work at risk again, up to the operator's limit.
    cache.on_priority_class(WPC, "DELETED", {"metadata": {"name": "mid", "resourceVersion": "2"},
                                             "value": 130})  # fmt: skip
    plan = Plan(status=running_status())
    plan_boost_write(plan, queued_job(), Finder(Saved(100, ago(900), 130, 20.0)), cache,
                     NOW + timedelta(seconds=20), memory=memory)  # fmt: skip
    assert boost_condition_of(plan) == ("True", "Boosting")


def test_a_class_gap_wider_than_the_boost_leaves_it_and_its_condition_alone():
    cache = cache_with(workload(spec=of_class(100)))
    cache.on_priority_class(WPC, None, {"metadata": {"name": "high"}, "value": 1000})
    plan = Plan(status=running_status())
    plan_boost_write(plan, queued_job(), Finder(Saved(100, ago(900), 130, 20.0)), cache, NOW)
    assert plan.annotate_workload[1][BOOST] == "48"
    assert boost_condition_of(plan) == ("True", "Boosting")


def test_a_workload_the_attempts_pods_do_not_own_is_not_written_and_the_job_says_why():
    foreign = [*owner_refs(gang(1)[:1]), pod_ref("other")]
    finder = Finder(Saved(100, ago(900), 130, 20.0))
    plan = Plan(status=running_status())
    plan_boost_write(plan, queued_job(), finder, cache_with(workload(owners=foreign)), NOW)
    assert plan.annotate_workload is None and finder.looks == 0
    condition = next(x for x in plan.status.conditions if x["type"] == "PriorityBoost")
    assert (condition["status"], condition["reason"]) == ("False", "BoostWorkloadNotOwned")
    assert (
        "its owner Pod other (uid uid-other) is not a pod of the job's attempt 1"
        in (condition["message"])
    )
    plan = Plan(status=running_status())  # a gang not in the cache owns nothing either
    plan_boost_write(plan, queued_job(), finder, cache_with(workload()), NOW, pods=[])
    assert plan.annotate_workload is None
    assert boost_condition_of(plan) == ("False", "BoostWorkloadNotOwned")


def test_the_cache_keeps_a_workloads_priority_and_owners_and_the_classes_values():
    cache = cache_with(workload(spec={**of_class(100), "podSets": [{"count": 2}]}))
    kept = cache.kueue("ns", "grpo-a1").workload
    assert kept["spec"] == of_class(100)  # not its pod sets
    assert [o["uid"] for o in kept["metadata"]["ownerReferences"]] == ["uid-a1-n0", "uid-a1-n1"]
    cache.on_priority_class(PC, None, {"metadata": {"name": "urgent", "resourceVersion": "3"},
                                       "value": 5000, "description": "x"})  # fmt: skip
    cache.on_priority_class(PC, "MODIFIED", {"metadata": {"name": "urgent",
                                                          "resourceVersion": "2"},
                                             "value": 1})  # a late event of before  # fmt: skip
    assert cache.priority_classes() == {WPC: {}, PC: {"urgent": 5000}}
    # A full list (the controller's relist) without it: deleted while the watch was away.
    cache.on_priority_class(WPC, None, {"metadata": {"name": "mid", "resourceVersion": "4"},
                                        "value": 150})  # fmt: skip
    cache.replace_priority_classes(PC, [], "5")
    assert cache.priority_classes() == {WPC: {"mid": 150}, PC: {}}
    assert Ceiling(0, "PriorityClass", "urgent", 5000, 4999).describe() == (
        "below PriorityClass urgent (5000), the next class above the job's 4999"
    )
