"""Kueue admits a job's gang as one pod group, preempts it for a higher-priority one, and
admits it again: rljob counts the preemption as a disruption and resumes from the newest
complete checkpoint.

Kueue's own manager (built from source) runs against the test control plane with its `pod`
integration and its PriorityBoost gate on, once per release of `binaries.KUEUE_VERSIONS`
(v0.17.0, v0.19.2): every test that uses it runs on each, `[v0.17.0]`, `[v0.19.2]`. On v0.19
WaitForPodsReady is on, as by its default, with a timeout of PODS_READY_TIMEOUT instead of 30
minutes. Each test's own ClusterQueue has quota for one gang of two GPUs.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
import test_recovery
from kube_steps import stays, wait_for
from kubernetes import client
from rljob_operator import constants as c
from rljob_operator.api.reasons import Phase, Reason
from rljob_operator.api.status import JobStatus
from rljob_testenv.binaries import KUEUE_VERSIONS
from rljob_testenv.operator_process import OperatorProcess, run_operator
from test_job_lifecycle import finish, get_job
from test_recovery import job_body, write_checkpoint, write_progress

# The recovery tests' fixtures: GPU nodes of the test's own, the claim `ckpts` bound to a
# volume with complete checkpoints at steps 10 and 20, and the operator that reads it.
nodes, claim, volume = test_recovery.nodes, test_recovery.claim, test_recovery.volume
recovering_operator = test_recovery.recovering_operator
BOOST_LIMIT = 100  # the administrator's (--max-priority-boost)

KUEUE_GROUP, KUEUE_VERSION = c.KUEUE_GROUP, c.KUEUE_VERSION  # the API the operator watches
HIGH_CLASS = "rljob-test-kueue-high"
# From v0.19 Kueue evicts an admitted workload whose pods are not all Ready within 30 minutes
# (WaitForPodsReady, on by default); here within this many seconds. Every other gang of these
# tests is Ready a second or two after its admission (kwok marks a pod Ready once it runs).
PODS_READY_TIMEOUT = 10


def waits_for_pods_ready(version):
    """Whether the release turns WaitForPodsReady on without being asked (v0.19 and later)."""
    return tuple(int(x) for x in version.lstrip("v").split(".")[:2]) >= (0, 19)


@pytest.fixture(scope="module", params=KUEUE_VERSIONS)
def kueue_manager(request, kubeconfig, api_client, tmp_path_factory):
    """Kueue's manager at one release, and the PriorityClass that outranks the jobs without
    one. Where WaitForPodsReady is on by default, only its timeout is set (short)."""
    from rljob_testenv import kueue as testenv_kueue

    version = request.param
    ready = {"timeout": f"{PODS_READY_TIMEOUT}s"} if waits_for_pods_ready(version) else None
    manager = testenv_kueue.start(kubeconfig, tmp_path_factory.mktemp(f"kueue-{version}"),
                                  version=version, wait_for_pods_ready=ready)  # fmt: skip
    scheduling = client.SchedulingV1Api(api_client)
    scheduling.create_priority_class(
        client.V1PriorityClass(metadata=client.V1ObjectMeta(name=HIGH_CLASS), value=1000)
    )
    try:
        yield manager
    finally:
        scheduling.delete_priority_class(HIGH_CLASS)
        manager.down()


@pytest.fixture
def kueue(api_client, kueue_manager):
    """A ResourceFlavor and a ClusterQueue of 2 GPUs that preempts lower priorities within
    itself, of this test alone, Active before the test starts.

    Not shared between tests: a test's gang keeps its quota after the test, until its pods
    end. The `nodes` fixture deletes their nodes before the namespace goes, so nothing acts
    as their kubelet any more, and the pods (held by Kueue's finalizer) stay Running until
    kube-controller-manager's pod GC fails them as orphans: it looks every 20 s and waits
    40 s after the node's deletion, a minute in all, longer on a loaded machine."""
    custom = client.CustomObjectsApi(api_client)
    queue = f"gpus-{uuid.uuid4().hex[:6]}"
    flavor = {"apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}", "kind": "ResourceFlavor",
              "metadata": {"name": queue}}  # fmt: skip
    cluster_queue = {
        "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
        "kind": "ClusterQueue",
        "metadata": {"name": queue},
        "spec": {
            "namespaceSelector": {},
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [{
                "coveredResources": ["nvidia.com/gpu"],
                "flavors": [{"name": queue, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 2}]}],
            }],
        },
    }  # fmt: skip
    custom.create_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "resourceflavors", flavor)
    custom.create_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", cluster_queue)

    def active():
        cq = custom.get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", queue)
        conditions = {x["type"]: x for x in (cq.get("status") or {}).get("conditions") or []}
        return conditions.get("Active", {}).get("status") == "True"

    try:
        wait_for(active, 60, f"the ClusterQueue {queue} to be Active")
        yield queue
    finally:
        custom.delete_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", queue)
        custom.delete_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "resourceflavors", queue)


@pytest.fixture
def local_queue(api_client, namespace, kueue):
    body = {"apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}", "kind": "LocalQueue",
            "metadata": {"name": "team"}, "spec": {"clusterQueue": kueue}}  # fmt: skip
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        KUEUE_GROUP, KUEUE_VERSION, namespace, "localqueues", body
    )
    return "team"


def queued_job(name, nodes, queue, priority_class=None):
    body = job_body(nodes, priority_class, resources={"limits": {"nvidia.com/gpu": 1}})
    body["metadata"] = {"name": name, "labels": {c.KUEUE_QUEUE_LABEL: queue}}
    return body


def pods_of(core, namespace, name, attempt):
    selector = f"{c.LABEL_JOB}={name},{c.LABEL_ATTEMPT}={attempt}"
    return core.list_namespaced_pod(namespace, label_selector=selector).items


def running(core, namespace, name, attempt):
    pods = pods_of(core, namespace, name, attempt)
    return pods if len(pods) == 2 and all(p.status.phase == "Running" for p in pods) else None


def gated(pod):
    return c.KUEUE_ADMISSION_GATE in {g.name for g in pod.spec.scheduling_gates or []}


def test_kueue_admits_the_gang_preempts_it_and_rljob_resumes_it_when_readmitted(
    api_client, core, namespace, nodes, recovering_operator, volume, local_queue
):
    create = client.CustomObjectsApi(api_client).create_namespaced_custom_object
    create(c.GROUP, c.VERSION, namespace, c.PLURAL, queued_job("low", nodes, local_queue))
    first = wait_for(lambda: running(core, namespace, "low", 0), 60, "low's gang, admitted")
    assert all(p.metadata.labels[c.KUEUE_POD_GROUP_LABEL] == "low-a0" for p in first)
    # The pass creates the gang before it writes the status that records it.
    resumed = wait_for(lambda: get_job(api_client, namespace, "low").get("status", {})
                       .get("resumeFrom"), 30, "low's status to record its gang")  # fmt: skip
    assert resumed["step"] == 20
    write_checkpoint(volume, 40)
    write_progress(volume, 43, step_seconds=0.5)

    create(c.GROUP, c.VERSION, namespace, c.PLURAL,
           queued_job("high", nodes, local_queue, HIGH_CLASS))  # fmt: skip

    wait_for(lambda: running(core, namespace, "high", 0), 60, "high's gang, admitted")
    stopped = [p for p in pods_of(core, namespace, "low", 0) if p.metadata.deletion_timestamp]
    assert len(stopped) == 2  # Kueue deleted both, with their grace period
    for pod in stopped:  # as their kubelet would once the trainers saved and exited
        finish(core, namespace, pod.metadata.name, 143)
    requeued = wait_for(lambda: pods_of(core, namespace, "low", 1), 60, "low's next gang")
    assert all(gated(p) for p in requeued)  # waiting for Kueue, with the quota taken

    def waiting_for_kueue():
        status = get_job(api_client, namespace, "low")["status"]
        queued = {x["type"]: x for x in status["conditions"]}.get("PodsUnschedulable", {})
        return status if queued.get("reason") == "WaitingForKueue" else None

    low = wait_for(waiting_for_kueue, 30, "low to say it waits for Kueue")
    assert (low["preemptions"], low["failures"], low["attempt"]) == (1, 0, 1)
    assert low["recoveries"][-1]["reason"] == "StoppedByKueue"
    queued = {x["type"]: x for x in low["conditions"]}["PodsUnschedulable"]
    assert queued["status"] == "True" and f"queue {local_queue}" in queued["message"]

    for pod in running(core, namespace, "high", 0):
        finish(core, namespace, pod.metadata.name, 0)

    wait_for(lambda: running(core, namespace, "low", 1), 60, "low's gang, admitted again")
    # The stopped attempt's Kueue workload is finished, not left in the queue to take quota.
    wait_for(lambda: not pods_of(core, namespace, "low", 0), 30, "low's stopped pods to go")
    low = get_job(api_client, namespace, "low")["status"]
    recovery = low["recoveries"][-1]
    assert (recovery["resumedFromStep"], recovery["lostSteps"]) == (40, 3)
    assert low["failures"] == 0
    assert get_job(api_client, namespace, "high")["status"]["phase"] == Phase.SUCCEEDED


def test_a_queue_that_does_not_exist_is_a_warning_in_kueues_words_until_it_is_created(
    api_client, core, namespace, nodes, kueue, recovering_operator
):
    """A typo in the queue label: Kueue never admits the gang, and says why on its Workload;
    the job says it too, as a Warning, instead of waiting in silence. No pod is placed and
    nothing is counted. Once the LocalQueue exists, the gang is admitted and runs."""
    create = client.CustomObjectsApi(api_client).create_namespaced_custom_object
    create(c.GROUP, c.VERSION, namespace, c.PLURAL, queued_job("typo", nodes, "tema"))

    def inadmissible():
        status = get_job(api_client, namespace, "typo").get("status") or {}
        stuck = {x["type"]: x for x in status.get("conditions") or []}.get("PodsUnschedulable", {})
        return stuck if stuck.get("reason") == "QueueInadmissible" else None

    stuck = wait_for(inadmissible, 60, "the job to say Kueue cannot admit it")
    assert stuck["status"] == "True" and "LocalQueue tema doesn't exist" in stuck["message"]

    def warnings():  # Events go out after the status write that sets the condition
        found = [e.type for e in core.list_namespaced_event(namespace).items
                 if e.reason == "QueueInadmissible"]  # fmt: skip
        return found or None

    assert wait_for(warnings, 15, "the Warning Event") == ["Warning"]
    pods = pods_of(core, namespace, "typo", 0)
    assert len(pods) == 2 and all(gated(p) and not p.spec.node_name for p in pods)
    status = get_job(api_client, namespace, "typo")["status"]
    assert (status["failures"], status["preemptions"], status["attempt"]) == (0, 0, 0)

    body = {"apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}", "kind": "LocalQueue",
            "metadata": {"name": "tema"}, "spec": {"clusterQueue": kueue}}  # fmt: skip
    create(KUEUE_GROUP, KUEUE_VERSION, namespace, "localqueues", body)

    wait_for(lambda: running(core, namespace, "typo", 0), 60, "the gang, admitted")

    def cleared():  # the gang admitted, then placed: the reason moves on before it clears
        conditions = get_job(api_client, namespace, "typo")["status"]["conditions"]
        stuck = {x["type"]: x for x in conditions}.get("PodsUnschedulable", {})
        return stuck if stuck.get("status") == "False" else None

    assert wait_for(cleared, 30, "the condition to clear")["reason"] != "QueueInadmissible"


@pytest.fixture
def pods_ready_default(kueue_manager):
    """Kueue of a release whose WaitForPodsReady is on by default; the test is skipped on the
    others (before its namespace and nodes are made)."""
    if not waits_for_pods_ready(kueue_manager.version):
        pytest.skip(f"Kueue {kueue_manager.version} leaves WaitForPodsReady off by default")
    return kueue_manager


def test_a_gang_whose_pods_are_not_ready_in_time_is_evicted_by_kueue_and_counted_a_disruption(
    pods_ready_default, api_client, core, namespace, nodes, recovering_operator, local_queue
):
    """Kueue v0.19's WaitForPodsReady, on by default: the gang is admitted, one pod runs on
    the only node it may use and the other can never join it there (required anti-affinity,
    gangScheduling Off so that kube-scheduler places the first alone). After the timeout Kueue
    evicts the Workload (Evicted, reason PodsReadyTimeout), marks both pods (TerminationTarget,
    WorkloadEvictedDueToPodsReadyTimeout) and deletes them. rljob counts a preemption, not a
    failure, with Kueue's words, and queues the next attempt."""
    body = queued_job("stuck", nodes[:1], local_queue)
    body["spec"]["gangScheduling"] = "Off"
    body["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"] = {
        "requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {c.LABEL_JOB: "stuck"}},
            "topologyKey": "kubernetes.io/hostname",
        }],
    }  # fmt: skip
    create = client.CustomObjectsApi(api_client).create_namespaced_custom_object
    create(c.GROUP, c.VERSION, namespace, c.PLURAL, body)

    def half_placed():
        pods = pods_of(core, namespace, "stuck", 0)
        phases = sorted(p.status.phase for p in pods if not gated(p))
        return pods if phases == ["Pending", "Running"] else None

    wait_for(half_placed, 60, "one pod of the admitted gang running, the other pending")

    def evicted():
        found = workload(api_client, namespace, "stuck-a0") or {}
        conditions = {x["type"]: x for x in (found.get("status") or {}).get("conditions") or []}
        evicted = conditions.get("Evicted", {})
        return evicted if evicted.get("status") == "True" else None

    eviction = wait_for(evicted, PODS_READY_TIMEOUT + 30, "Kueue's eviction by PodsReadyTimeout")
    assert eviction["reason"] == "PodsReadyTimeout"
    assert "Exceeded the PodsReady timeout" in eviction["message"]

    def recorded():
        status = get_job(api_client, namespace, "stuck").get("status") or {}
        return status if status.get("preemptions") == 1 else None

    for pod in pods_of(core, namespace, "stuck", 0):  # as its kubelet would, if it has one
        if pod.metadata.deletion_timestamp and pod.spec.node_name:
            finish(core, namespace, pod.metadata.name, 143)
    status = wait_for(recorded, 30, "the eviction, counted as a preemption")
    assert (status["failures"], status["attempt"]) == (0, 1)
    assert status["recoveries"][-1]["reason"] == Reason.STOPPED_BY_KUEUE
    last = status["lastEnd"]
    assert (last["kind"], last["reason"]) == ("Disruption", Reason.STOPPED_BY_KUEUE)
    assert "WorkloadEvictedDueToPodsReadyTimeout" in last["message"]
    assert "Exceeded the PodsReady timeout" in last["message"]


def workload(api_client, namespace, name):
    """The Kueue Workload of a pod group, None while there is none."""
    custom = client.CustomObjectsApi(api_client)
    try:
        return custom.get_namespaced_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, namespace, "workloads", name
        )
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def boost_of(api_client, namespace, group):
    found = workload(api_client, namespace, group) or {"metadata": {}}
    return (found["metadata"].get("annotations") or {}).get(c.KUEUE_PRIORITY_BOOST_ANNOTATION)


def written_at(api_client, namespace, group):
    found = workload(api_client, namespace, group) or {"metadata": {}}
    return (found["metadata"].get("annotations") or {}).get(c.PRIORITY_BOOST_TIME_ANNOTATION)


def reserved_at(api_client, namespace, group):
    """When Kueue reserved quota for the pod group (Kueue orders equal priorities by it)."""
    conditions = (workload(api_client, namespace, group) or {}).get("status", {}).get("conditions")
    reserved = {x["type"]: x for x in conditions or []}.get(c.KUEUE_QUOTA_CONDITION, {})
    if reserved.get("status") != "True":
        return None
    return datetime.fromisoformat(reserved["lastTransitionTime"].replace("Z", "+00:00"))


def single_gpu_job(name, nodes, queue, directory, boost, priority_class=None):
    """One pod of one GPU, its checkpoints in its own folder of the claim `ckpts`."""
    body = queued_job(name, nodes, queue, priority_class)
    body["spec"]["nnodes"] = 1
    body["spec"]["checkpoint"]["directory"] = f"{directory}/run/checkpoints"
    body["spec"]["queueing"] = {"priorityBoost": boost}
    return body


def one_running(core, namespace, name):
    pods = pods_of(core, namespace, name, 0)
    return pods if len(pods) == 1 and pods[0].status.phase == "Running" else None


def stopped(core, namespace, name):
    """Kueue preempted the job's first attempt: its pod is going or gone."""
    pods = pods_of(core, namespace, name, 0)
    return not pods or any(p.metadata.deletion_timestamp for p in pods)


@pytest.fixture
def boosting_operator(kubeconfig, namespace, crd, claim, volume, tmp_path):
    """The recovering operator, with the administrator's leave to boost up to BOOST_LIMIT, and
    no floors under the jobs' policies: the tests' jobs look every second."""
    args = ["--standalone", "--namespace", namespace, "--max-priority-boost", str(BOOST_LIMIT),
            "--min-boost-interval-seconds", "1", "--min-gpu-seconds-per-point", "1"]  # fmt: skip
    process = OperatorProcess(kubeconfig, namespace, tmp_path / "operator.log", args=args,
                              RLJOB_CHECKPOINT_VOLUMES=f"ckpts={volume}")  # fmt: skip
    yield from run_operator(process)


def boost_condition(api_client, namespace, name):
    conditions = (get_job(api_client, namespace, name).get("status") or {}).get("conditions") or []
    return next(
        ((x["status"], x["reason"]) for x in conditions if x["type"] == "PriorityBoost"), None
    )


@pytest.mark.parametrize("boost", [True, False], ids=["boost", "no-boost"])
def test_the_priority_boost_makes_kueue_preempt_the_job_that_loses_least(
    api_client, core, namespace, nodes, boosting_operator, volume, local_queue, boost
):
    """X saved just now; Y, of the same priority and admitted later, has 980 steps of 10 s
    unsaved. Z, of a higher class, needs one of their GPUs. Kueue takes the most recently
    admitted of equal priorities, Y; with the boost Y's Workload carries 98 points (9,800
    GPU-seconds at 100 a point) and X's none, so Kueue takes X. The boost then follows Y's
    checkpoints: a save brings it to 0. The jobs ask for up to 500, and the administrator
    allows 100: clamped, and their condition says so."""
    create = client.CustomObjectsApi(api_client).create_namespaced_custom_object
    policy = {"enabled": boost, "maxBoost": 500, "gpuSecondsPerPoint": 100,
              "minIntervalSeconds": 1}  # fmt: skip
    write_checkpoint(volume / "x", 50)
    write_progress(volume / "x", 50, step_seconds=10.0)  # X saved its last step
    write_checkpoint(volume / "y", 20)
    write_progress(volume / "y", 1000, step_seconds=10.0)  # Y: 980 steps since its save

    create(c.GROUP, c.VERSION, namespace, c.PLURAL,
           single_gpu_job("x", nodes, local_queue, "x", policy))  # fmt: skip
    wait_for(lambda: one_running(core, namespace, "x"), 60, "x, admitted")
    x_at = wait_for(lambda: reserved_at(api_client, namespace, "x-a0"), 30, "x's reservation")
    # Kueue's times are in seconds: Y's must be later than X's for the order to be Y first.
    wait_for(lambda: datetime.now(UTC) >= x_at + timedelta(seconds=1.5), 5, "the next second")
    create(c.GROUP, c.VERSION, namespace, c.PLURAL,
           single_gpu_job("y", nodes, local_queue, "y", policy))  # fmt: skip
    wait_for(lambda: one_running(core, namespace, "y"), 60, "y, admitted")
    assert reserved_at(api_client, namespace, "y-a0") > x_at

    if boost:
        wait_for(lambda: boost_of(api_client, namespace, "y-a0") == "98", 30, "y's boost of 98")
        assert boost_condition(api_client, namespace, "y") == ("True", "BoostClamped")
        assert boost_of(api_client, namespace, "x-a0") is None  # nothing at risk: not written
        # Y's passes come every second (its interval) and write nothing while nothing changes.
        written = written_at(api_client, namespace, "y-a0")
        stays(lambda: written_at(api_client, namespace, "y-a0") == written, 3, "no new write")
    else:
        stays(lambda: boost_of(api_client, namespace, "y-a0") is None, 3, "y without a boost")
        assert boost_condition(api_client, namespace, "y") is None

    urgent = single_gpu_job("z", nodes, local_queue, "z", {"enabled": False}, HIGH_CLASS)
    create(c.GROUP, c.VERSION, namespace, c.PLURAL, urgent)
    victim, spared = ("x", "y") if boost else ("y", "x")
    wait_for(lambda: stopped(core, namespace, victim), 60, f"Kueue to preempt {victim}")
    assert not stopped(core, namespace, spared)
    for pod in pods_of(core, namespace, victim, 0):  # as its kubelet would once it saved
        finish(core, namespace, pod.metadata.name, 143)
    wait_for(lambda: one_running(core, namespace, "z"), 60, "z, admitted")
    stays(lambda: not stopped(core, namespace, spared), 2, f"{spared} to keep running")

    def recorded():
        status = get_job(api_client, namespace, victim)["status"]
        return status if status.get("preemptions") == 1 else None

    victim_status = wait_for(recorded, 30, f"{victim}'s preemption, recorded")
    assert victim_status["recoveries"][-1]["reason"] == "StoppedByKueue"
    assert victim_status["failures"] == 0

    if boost:  # Y saves its last finished step: nothing at risk, the boost drops to 0
        write_checkpoint(volume / "y", 1000)
        wait_for(lambda: boost_of(api_client, namespace, "y-a0") == "0", 30, "y's boost of 0")


CLASSES = {"low": 100, "mid": 150, "high": 1000}  # WorkloadPriorityClasses, by short name


@pytest.fixture
def workload_priority_classes(api_client, kueue_manager):
    """Kueue's WorkloadPriorityClasses low (100), mid (150) and high (1000) of this test:
    their names by short name."""
    custom = client.CustomObjectsApi(api_client)
    names = {short: f"rljob-test-{short}-{uuid.uuid4().hex[:6]}" for short in CLASSES}
    for short, name in names.items():
        body = {"apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}", "kind": "WorkloadPriorityClass",
                "metadata": {"name": name}, "value": CLASSES[short]}  # fmt: skip
        custom.create_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "workloadpriorityclasses",
                                            body)  # fmt: skip
    try:
        yield names
    finally:
        for name in names.values():
            custom.delete_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION,
                                                "workloadpriorityclasses", name)  # fmt: skip


def of_workload_class(body, name):
    """The job's pods name a WorkloadPriorityClass, as Kueue reads it (a pod label)."""
    body["spec"]["template"]["metadata"] = {"labels": {"kueue.x-k8s.io/priority-class": name}}
    return body


def test_a_boost_stays_below_the_next_class_up_which_still_preempts_the_job(
    api_client, core, namespace, nodes, workload_priority_classes, boosting_operator, volume,
    local_queue,
):  # fmt: skip
    """L, of class low (100), has 990 steps of 10 s unsaved: 99 points at 100 GPU-seconds a
    point, within the operator's 100. But Kueue would then never let a Workload of class mid
    (150) preempt it (it needs a priority strictly above 100 + boost), so the boost stops at
    49, and L's condition says why. M, of class mid, needs both GPUs of the queue: Kueue
    preempts L for it."""
    classes = workload_priority_classes
    create = client.CustomObjectsApi(api_client).create_namespaced_custom_object
    write_checkpoint(volume / "l", 10)
    write_progress(volume / "l", 1000, step_seconds=10.0)
    policy = {"enabled": True, "gpuSecondsPerPoint": 100, "minIntervalSeconds": 1}
    low = single_gpu_job("l", nodes, local_queue, "l", policy)
    create(c.GROUP, c.VERSION, namespace, c.PLURAL, of_workload_class(low, classes["low"]))
    wait_for(lambda: one_running(core, namespace, "l"), 60, "l, admitted")

    wait_for(lambda: boost_of(api_client, namespace, "l-a0") == "49", 30, "l's boost of 49")
    assert workload(api_client, namespace, "l-a0")["spec"]["priority"] == 100
    status = get_job(api_client, namespace, "l")["status"]
    condition = next(x for x in status["conditions"] if x["type"] == "PriorityBoost")
    assert (condition["status"], condition["reason"]) == ("True", "BoostClamped")
    assert (f"below WorkloadPriorityClass {classes['mid']} (150), the next class above the "
            "job's 100") in condition["message"]  # fmt: skip
    # The status records the boost once the Workload carries it: the pass after the write's.
    wait_for(lambda: (get_job(api_client, namespace, "l")["status"].get("priorityBoost") or {})
             .get("boost") == 49, 10, "l's status to record the boost of 49")  # fmt: skip

    mid = of_workload_class(queued_job("m", nodes, local_queue), classes["mid"])
    create(c.GROUP, c.VERSION, namespace, c.PLURAL, mid)  # two pods of one GPU: all the quota
    wait_for(lambda: stopped(core, namespace, "l"), 60, "Kueue to preempt l for m")
    for pod in pods_of(core, namespace, "l", 0):  # as its kubelet would
        finish(core, namespace, pod.metadata.name, 143)
    wait_for(lambda: running(core, namespace, "m", 0), 60, "m, admitted")


def test_a_refused_boost_write_costs_one_request_per_back_off_and_the_job_says_why(
    cluster_name, core, namespace, tmp_path
):
    """The operator without RBAC for Workloads (a ServiceAccount with no role): the real API
    server refuses the first write (403); twenty passes in a row then send no request, and the
    job's PriorityBoost condition carries the API server's words."""

    from chart_helpers import service_account_kubeconfig
    from kubernetes import config
    from rljob_operator.api.status import JobStatus
    from rljob_operator.api.timestamps import iso
    from rljob_operator.kube import API_REQUESTS, CountingApiClient, Kube
    from rljob_operator.reconcile import act
    from rljob_operator.reconcile.boost.decide import decide_boost
    from rljob_operator.reconcile.boost.gate import BoostReads
    from rljob_operator.reconcile.boost.memory import BoostMemory
    from rljob_operator.reconcile.boost.pricing import Saved
    from rljob_operator.reconcile.plan import Plan
    from rljob_operator.reconcile.settings import Settings
    from rljob_operator.reconcile.snapshot import Setup, job_ref, take_snapshot
    from rljob_operator.runtime.cache import ClusterCache, JobView

    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="no-rights"))
    )
    path = service_account_kubeconfig(cluster_name, namespace, "no-rights", tmp_path / "kubeconfig")
    configuration = client.Configuration()
    config.load_kube_config(str(path), client_configuration=configuration)
    kube = Kube(CountingApiClient(configuration))
    job = {
        "metadata": {"name": "grpo", "namespace": namespace, "resourceVersion": "5",
                     "labels": {c.KUEUE_QUEUE_LABEL: "team"}},
        "spec": {"image": "trainer:1", "nnodes": 1,
                 "queueing": {"priorityBoost": {"enabled": True, "gpuSecondsPerPoint": 1}}},
        "status": {"attempt": 0, "phase": "Running", "conditions": [],
                   "attemptCreationTime": iso(datetime.now(UTC) - timedelta(hours=2))},
    }  # fmt: skip
    cache, memory = ClusterCache(), BoostMemory()
    for group in c.PRIORITY_CLASS_KINDS:  # as the operator's relist makes them: none here
        cache.replace_priority_classes(group, [], "")
    pod = {"metadata": {"namespace": namespace, "name": "grpo-a0-n0", "uid": "uid-grpo-a0-n0",
                        "labels": {c.LABEL_JOB: "grpo", c.LABEL_ATTEMPT: "0",
                                   c.LABEL_ROLE: c.ROLE_TRAINER}}}  # fmt: skip
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "grpo-a0-n0", "uid": "uid-grpo-a0-n0"}
    cache.on_admission("ADDED", {"metadata": {"namespace": namespace, "name": "grpo-a0",
                                              "resourceVersion": "1",
                                              "ownerReferences": [owner]}})  # fmt: skip

    class Folder:  # the job's checkpoint folder: nothing saved for an hour
        def saved(self, spec):
            return Saved(1, datetime.now(UTC) - timedelta(hours=1))

    patches = API_REQUESTS.labels("patch", "workloads")
    before = patches._value.get()
    plans = []
    for _ in range(21):
        reads = BoostReads(memory, Folder())
        view = JobView(job, [pod], frozenset(), {}, cache.kueue(namespace, "grpo-a0"))
        snap = take_snapshot(view, datetime.now(UTC), Setup(Settings(max_priority_boost=50),
                                                            boost=reads))  # fmt: skip
        reads.keep(snap.ref, snap.boost)
        plan = Plan(status=JobStatus.from_dict(json_copy(job["status"])))
        decide_boost(plan, snap)
        job["status"] = json_copy(
            plan.status.to_dict()
        )  # as if stored: this pass's one request is the boost's
        act.apply(kube, cache, memory, job, plan, lambda *event: None)
        plans.append(plan)
    assert plans[0].annotate_workload is not None  # the first pass tried
    assert patches._value.get() - before == 1  # and only the first
    refusal = memory.recall(job_ref(job)).refusal
    assert refusal is not None and refusal.count == 1 and "403" in refusal.why
    condition = next(x for x in plans[-1].status.conditions if x["type"] == "PriorityBoost")
    assert (condition["status"], condition["reason"]) == ("False", "BoostWriteRefused")
    assert "Forbidden" in condition["message"] or "forbidden" in condition["message"]


def kube_as(cluster_name, api_client, namespace, account, tmp_path, rules=()):
    """The operator's Kube as a ServiceAccount of the test's own, granted only `rules` in the
    namespace (a Role): the real API server refuses the rest, as it would an operator run
    outside the chart with less than the chart grants."""
    from chart_helpers import service_account_kubeconfig
    from kubernetes import config
    from rljob_operator.kube import CountingApiClient, Kube

    core, rbac = client.CoreV1Api(api_client), client.RbacAuthorizationV1Api(api_client)
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=account))
    )
    if rules:
        rbac.create_namespaced_role(namespace, client.V1Role(
            metadata=client.V1ObjectMeta(name=account), rules=list(rules)))  # fmt: skip
        rbac.create_namespaced_role_binding(namespace, client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name=account),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role",
                                      name=account),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name=account,
                                           namespace=namespace)],
        ))  # fmt: skip
    path = service_account_kubeconfig(cluster_name, namespace, account, tmp_path / account)
    configuration = client.Configuration()
    config.load_kube_config(str(path), client_configuration=configuration)
    return Kube(CountingApiClient(configuration))


def boosted_job_in_cluster(api_client, namespace, name="grpo"):
    """A queued job with the boost on, stored in the API server and Running for two hours
    (its status written as its operator would): a point per GPU-second, one GPU."""
    custom = client.CustomObjectsApi(api_client)
    body = {
        "apiVersion": f"{c.GROUP}/{c.VERSION}", "kind": c.KIND,
        "metadata": {"name": name, "labels": {c.KUEUE_QUEUE_LABEL: "team"}},
        "spec": {"image": "trainer:1", "nnodes": 1,
                 "queueing": {"priorityBoost": {"enabled": True, "gpuSecondsPerPoint": 1}}},
    }  # fmt: skip
    custom.create_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, body)
    from rljob_operator.api.timestamps import iso

    status = {"attempt": 0, "phase": "Running",
              "attemptCreationTime": iso(datetime.now(UTC) - timedelta(hours=2))}  # fmt: skip
    return custom.patch_namespaced_custom_object_status(
        c.GROUP, c.VERSION, namespace, c.PLURAL, name, {"status": status}
    )


def gang_and_workload(namespace, name="grpo"):
    """The job's pod of attempt 0 as the operator's cache holds it, and its Kueue Workload as
    the cache would: owned by that pod, without a boost."""
    pod = {"metadata": {"namespace": namespace, "name": f"{name}-a0-n0", "uid": f"uid-{name}",
                        "labels": {c.LABEL_JOB: name, c.LABEL_ATTEMPT: "0",
                                   c.LABEL_ROLE: c.ROLE_TRAINER}}}  # fmt: skip
    owner = {"apiVersion": "v1", "kind": "Pod", "name": f"{name}-a0-n0", "uid": f"uid-{name}"}
    workload = {"metadata": {"namespace": namespace, "name": f"{name}-a0", "resourceVersion": "1",
                             "ownerReferences": [owner]}, "spec": {"priority": 0}}  # fmt: skip
    return pod, workload


class UnsavedHour:
    """The job's checkpoint folder: nothing saved for an hour."""

    def saved(self, spec):
        from rljob_operator.reconcile.boost.pricing import Saved

        return Saved(1, datetime.now(UTC) - timedelta(hours=1))


def test_a_boost_the_api_server_refuses_is_never_claimed_by_the_jobs_status(
    cluster_name, api_client, namespace, crd, tmp_path
):
    """The operator may write the job's status but not patch Kueue's Workloads (an operator
    outside the chart, or the chart without kueue.priorityBoost but --max-priority-boost set):
    the real API server stores the status and refuses the boost (403). status.priorityBoost
    must not claim the boost that is on no Workload, and the condition says why."""
    import passes
    from rljob_operator.kube import API_REQUESTS
    from rljob_operator.reconcile import act
    from rljob_operator.reconcile.boost.memory import BoostMemory
    from rljob_operator.reconcile.plan import Plan
    from rljob_operator.runtime.cache import ClusterCache

    status_only = client.V1PolicyRule(api_groups=[c.GROUP], resources=[f"{c.PLURAL}/status"],
                                      verbs=["patch"])  # fmt: skip
    kube = kube_as(cluster_name, api_client, namespace, "status-only", tmp_path, [status_only])
    cache, memory = ClusterCache(), BoostMemory()
    cache.on_job(None, boosted_job_in_cluster(api_client, namespace))
    for group in c.PRIORITY_CLASS_KINDS:  # as the operator's relist makes them: none here
        cache.replace_priority_classes(group, [], "")
    pod, workload = gang_and_workload(namespace)
    cache.on_admission("ADDED", workload)
    patches = API_REQUESTS.labels("patch", "workloads")
    before = patches._value.get()

    for _ in range(3):  # the pass that writes, the one right after it, and one more
        job = cache.view(namespace, "grpo").job
        plan = Plan(status=JobStatus.from_dict(json_copy(job.get("status"))))
        passes.plan_boost_write(plan, job, UnsavedHour(), cache, memory, datetime.now(UTC),
                                limit=50, pods=[pod])  # fmt: skip
        act.apply(kube, cache, memory, job, plan, lambda *event: None)

    assert patches._value.get() - before == 1  # the first pass tried, and was refused
    stored = get_job(api_client, namespace, "grpo")["status"]
    assert "priorityBoost" not in stored
    condition = next(x for x in stored["conditions"] if x["type"] == "PriorityBoost")
    assert (condition["status"], condition["reason"]) == ("False", "BoostWriteRefused")
    assert "forbidden" in condition["message"].lower()


def test_an_operator_that_cannot_list_the_priority_classes_holds_the_boost_at_0_and_says_why(
    cluster_name, api_client, namespace, crd, tmp_path
):
    """An operator confined to its namespace (a Role that lists everything there, nodes
    cluster-wide, but no priority classes): its relist's lists of the classes are refused
    (403). Without them it cannot know the next class above a job, so a job that would have
    50 points gets none, and its condition says why."""
    import passes
    from rljob_operator.controller import Controller
    from rljob_operator.reconcile.boost.memory import BoostMemory
    from rljob_operator.reconcile.lookup.finder import CheckpointFinder
    from rljob_operator.reconcile.plan import Plan

    everything_here = client.V1PolicyRule(api_groups=["*"], resources=["*"], verbs=["list"])
    kube = kube_as(cluster_name, api_client, namespace, "namespaced", tmp_path,
                   [everything_here])  # fmt: skip
    rbac = client.RbacAuthorizationV1Api(api_client)
    nodes_role = f"rljob-test-nodes-{namespace}"
    rbac.create_cluster_role(client.V1ClusterRole(
        metadata=client.V1ObjectMeta(name=nodes_role),
        rules=[client.V1PolicyRule(api_groups=[""], resources=["nodes"], verbs=["list"])],
    ))  # fmt: skip
    rbac.create_cluster_role_binding(client.V1ClusterRoleBinding(
        metadata=client.V1ObjectMeta(name=nodes_role),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole",
                                  name=nodes_role),
        subjects=[client.RbacV1Subject(kind="ServiceAccount", name="namespaced",
                                       namespace=namespace)],
    ))  # fmt: skip
    job = boosted_job_in_cluster(api_client, namespace)
    controller = Controller(kube, CheckpointFinder({}, "unused"), [namespace])
    try:
        controller.relist()  # jobs, pods, shared children and nodes listed; the classes not
    finally:
        controller.stop()
        rbac.delete_cluster_role_binding(nodes_role)
        rbac.delete_cluster_role(nodes_role)
    cache = controller.cache
    assert cache.view(namespace, "grpo").job is not None
    pod, workload = gang_and_workload(namespace)
    cache.on_admission("ADDED", workload)

    plan = Plan(status=JobStatus.from_dict(json_copy(job["status"])))
    passes.plan_boost_write(plan, job, UnsavedHour(), cache, BoostMemory(), datetime.now(UTC),
                            limit=50, pods=[pod])  # fmt: skip

    assert plan.annotate_workload is None  # 0, and none on the Workload: nothing to write
    condition = next(x for x in plan.status.conditions if x["type"] == "PriorityBoost")
    assert (condition["status"], condition["reason"]) == ("False", "BoostCeilingUnknown")
    assert "PriorityClasses: list priorityclasses.scheduling.k8s.io: 403" in condition["message"]


def json_copy(value):
    import json

    return json.loads(json.dumps(value))
