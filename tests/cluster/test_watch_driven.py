"""The watch-driven core on the real control plane: node events wake only the jobs with
pods there (a termination notice at once), and a pass on a stale cache loses nothing to a
conflict."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

import pytest
import test_recovery
from kube_steps import stays, wait_for
from kubernetes import client
from rljob_contract import CHECKPOINT_REQUEST_ANNOTATION
from rljob_contract.request import parse_request
from rljob_operator import constants as c
from rljob_operator import controller as controller_module
from rljob_operator.api.reasons import Phase
from rljob_operator.controller import Controller
from rljob_operator.kube import Kube, KubeError
from rljob_operator.reconcile.lookup.finder import CheckpointFinder
from rljob_testenv.operator_process import OperatorProcess, run_operator
from test_job_lifecycle import get_job, phase_is

nodes = test_recovery.nodes  # three GPU nodes of the test's own
PASS = re.compile(r"rljob_operator\.controller: pass (\S+)/(\S+)")


def one_node_job(name: str, node: str) -> dict:
    """The recovery tests' job on one given node, starting fresh and failing on a failure."""
    body = test_recovery.job_body(
        [node], nnodes=1, checkpoint={"resume": "never"}, restartPolicy={"maxFailures": 0}
    )
    body["metadata"]["name"] = name
    return body


def create(api_client, namespace: str, body: dict) -> None:
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, body
    )


def passes_since(operator: OperatorProcess, offset: int) -> list[str]:
    """The jobs the operator ran a pass for, from `offset` in its log on."""
    return [m.group(2) for m in PASS.finditer(operator.log()[offset:])]


def settled(operator: OperatorProcess, quiet: float = 2, timeout: float = 30) -> int:
    """Wait until the operator has run no pass for `quiet` seconds, and return the length of
    its log then. A pass that changes nothing shows only in the log, and the start's last one
    is requeued a second after the gang is created."""
    last = {"passes": -1, "at": 0.0}

    def quiet_offset() -> int | None:
        log = operator.log()
        passes = len(PASS.findall(log))
        if passes != last["passes"]:
            last.update(passes=passes, at=time.monotonic())
        return len(log) if time.monotonic() - last["at"] >= quiet else None

    return wait_for(quiet_offset, timeout, f"the operator to run no pass for {quiet:g}s")


@pytest.fixture
def logging_operator(kubeconfig, namespace, crd, tmp_path):
    """The operator logging each pass (--verbose), with no periodic resync in the way."""
    args = ["--standalone", "--namespace", namespace, "--verbose", "--resync-seconds", "3600"]
    process = OperatorProcess(kubeconfig, namespace, tmp_path / "operator.log", args=args)
    yield from run_operator(process)


def test_a_node_event_wakes_only_the_jobs_with_pods_on_that_node(
    api_client, core, namespace, nodes, logging_operator
):
    operator = logging_operator
    create(api_client, namespace, one_node_job("near", nodes[0]))
    create(api_client, namespace, one_node_job("far", nodes[1]))
    for name in ("near", "far"):
        wait_for(lambda n=name: phase_is(api_client, namespace, Phase.RUNNING, n), what=f"{name}")
    far_pods = {p.metadata.uid for p in core.list_namespaced_pod(namespace).items
                if p.metadata.labels.get(c.LABEL_JOB) == "far"}  # fmt: skip
    quiet = settled(operator)  # the passes for the start's last pod events, and the requeued one

    # A change that is not about readiness, on both nodes: no job needs a pass.
    for node in nodes[:2]:
        core.patch_node(node, {"metadata": {"labels": {"rljob.io/test-touch": "1"}}})
    stays(lambda: passes_since(operator, quiet) == [], 3, "no pass after a change of labels")

    # The node of "near" goes away: only "near" is woken, and it recovers elsewhere.
    gone = len(operator.log())
    core.delete_node(nodes[0])
    last_end = wait_for(
        lambda: (get_job(api_client, namespace, "near").get("status") or {}).get("lastEnd"),
        what="near to record the end of its attempt",
    )
    assert last_end["reason"] == "NodeLost"
    woken = passes_since(operator, gone)
    assert woken and set(woken) == {"near"}, woken
    still = {p.metadata.uid for p in core.list_namespaced_pod(namespace).items
             if p.metadata.labels.get(c.LABEL_JOB) == "far"}  # fmt: skip
    assert still == far_pods
    assert get_job(api_client, namespace, "far")["status"]["attempt"] == 0


def test_a_termination_notice_on_a_node_asks_at_once_for_a_save_by_when_the_node_goes(
    api_client, core, namespace, nodes, logging_operator
):
    """No resync is due for an hour, and the second full list after the start is past: the
    node's event itself must wake the job, and the request carries the time the node's
    annotation gives."""
    create(api_client, namespace, one_node_job("near", nodes[0]))
    wait_for(lambda: phase_is(api_client, namespace, Phase.RUNNING, "near"), what="near to run")
    wait_for(lambda: logging_operator.log().count("relist: ") >= 2, what="the second list")
    settled(logging_operator)

    goes = "2026-12-02T21:30:00Z"
    core.patch_node(nodes[0], {"metadata": {"annotations": {c.NODE_TERMINATION_TIME: goes}}})

    def request() -> str | None:
        (pod,) = core.list_namespaced_pod(namespace).items
        return (pod.metadata.annotations or {}).get(CHECKPOINT_REQUEST_ANNOTATION)

    asked = wait_for(request, what="the checkpoint request on the pod")
    assert parse_request(asked).deadline == datetime(2026, 12, 2, 21, 30, tzinfo=UTC)
    (event,) = [e for e in core.list_namespaced_event(namespace).items
                if e.reason == "CheckpointRequested"]  # fmt: skip
    assert f"by {goes}" in event.message and "near-a0-n0" in event.message


def test_a_node_that_goes_sooner_than_it_said_reaches_the_pod_asked_already(
    api_client, core, namespace, nodes, logging_operator
):
    """The pod was asked to save by the time its node's annotation gave. The node then says it
    goes a minute sooner: the pod, asked already, is asked again by that time. Then it says it
    goes later: the pod keeps the sooner time, and its pass writes nothing to it."""
    operator = logging_operator
    create(api_client, namespace, one_node_job("near", nodes[0]))
    wait_for(lambda: phase_is(api_client, namespace, Phase.RUNNING, "near"), what="near to run")

    def goes(at: str) -> None:
        core.patch_node(nodes[0], {"metadata": {"annotations": {c.NODE_TERMINATION_TIME: at}}})

    def deadline() -> datetime | None:
        (pod,) = core.list_namespaced_pod(namespace).items
        asked = (pod.metadata.annotations or {}).get(CHECKPOINT_REQUEST_ANNOTATION)
        return parse_request(asked).deadline if asked else None

    goes("2026-12-02T21:30:00Z")
    wait_for(lambda: deadline() == datetime(2026, 12, 2, 21, 30, tzinfo=UTC), what="the request")
    goes("2026-12-02T21:29:00Z")
    wait_for(lambda: deadline() == datetime(2026, 12, 2, 21, 29, tzinfo=UTC),
             what="the sooner time on the pod asked already")  # fmt: skip
    quiet = settled(operator)
    goes("2026-12-02T21:31:00Z")
    wait_for(lambda: "near" in passes_since(operator, quiet), what="the node's event to wake near")
    settled(operator)
    assert deadline() == datetime(2026, 12, 2, 21, 29, tzinfo=UTC)
    assert "request: patch pods " not in operator.log()[quiet:]


def test_a_resource_the_cluster_does_not_serve_lists_as_none_not_as_an_error(api_client):
    """Without Kueue its WorkloadPriorityClasses are not served: the relist keeps none, where a
    404 used to be an error and a warning at every relist of a cluster without Kueue."""
    kube = Kube(api_client)
    assert kube.list_served("absent.rljob.io", "v1", "things") is None
    listed, revision = kube.list_priority_classes(c.POD_PRIORITY_GROUP)
    assert "system-node-critical" in {pc["metadata"]["name"] for pc in listed} and revision


def test_a_status_write_on_a_stale_cache_conflicts_then_passes_again_on_the_newest_job(
    api_client, core, namespace, crd, nodes
):
    """The pass reads the job from the cache; another writer has moved the job on since.
    The pass's write carries the resourceVersion it read, so it fails instead of
    overwriting; the controller reads the job and passes again, keeping the other write."""
    kube = Kube(api_client)
    controller = Controller(kube, CheckpointFinder({}, "unused"), [namespace])
    key = (namespace, "grpo")
    create(api_client, namespace, one_node_job("grpo", nodes[0]))
    try:
        controller.relist()
        controller.process(key)  # creates the gang; the cache holds the job it wrote
        wait_for(
            lambda: [p for p in core.list_namespaced_pod(namespace).items
                     if p.status.phase == "Running"],
            what="the gang to run",
        )  # fmt: skip
        for pod in core.list_namespaced_pod(namespace).items:  # the cache sees it Running...
            controller.cache.on_pod(None, api_client.sanitize_for_serialization(pod))
        stale = controller.cache.view(namespace, "grpo").job
        # ...but not what another writer did to the job meanwhile.
        client.CustomObjectsApi(api_client).patch_namespaced_custom_object_status(
            c.GROUP, c.VERSION, namespace, c.PLURAL, "grpo", {"status": {"preemptions": 7}}
        )

        controller.process(key)

        job = get_job(api_client, namespace)
        assert job["status"]["phase"] != Phase.RUNNING  # the stale pass wrote nothing
        assert job["metadata"]["resourceVersion"] != stale["metadata"]["resourceVersion"]
        assert controller.queue.get(timeout=0) == key  # ...and asked to pass again at once
        controller.queue.done(key)
        controller.process(key)
        job = get_job(api_client, namespace)
        assert (job["status"]["phase"], job["status"]["preemptions"]) == (Phase.RUNNING, 7)
    finally:
        client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
            c.GROUP, c.VERSION, namespace, c.PLURAL, "grpo"
        )
        controller.relist()
        controller.process(key)  # releases the pods' finalizers, as the operator would


def test_the_fence_is_an_empty_status_write_that_conflicts_on_an_old_version_and_changes_nothing(
    api_client, namespace, crd
):
    """What a pass that creates or deletes without a status change writes first."""
    kube = Kube(api_client)
    create(api_client, namespace, one_node_job("grpo", "nowhere"))
    old = get_job(api_client, namespace)["metadata"]["resourceVersion"]
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, "grpo", {"metadata": {"labels": {"moved": "on"}}}
    )
    current = get_job(api_client, namespace)["metadata"]["resourceVersion"]

    with pytest.raises(KubeError) as refused:
        kube.patch_status(namespace, "grpo", {}, old)
    assert refused.value.status == 409
    assert (
        kube.patch_status(namespace, "grpo", {}, current)["metadata"]["resourceVersion"] == current
    )


def test_a_stale_pass_that_would_create_a_gang_creates_no_pod_and_the_next_takes_its_podgroup(
    api_client, core, namespace, crd, nodes
):
    """The fence goes out beside the PodGroup's create, which runs nothing: a pass on a job
    that another writer has moved on fails before any pod exists, and leaves at most the
    attempt's PodGroup, which the next pass creates the gang into. This controller has no
    watch, so its cache stays at the job it listed."""
    kube = Kube(api_client)
    controller = Controller(kube, CheckpointFinder({}, "unused"), [namespace])
    key = (namespace, "grpo")
    create(api_client, namespace, test_recovery.job_body(nodes, checkpoint={"resume": "never"}))
    custom = client.CustomObjectsApi(api_client)
    try:
        controller.relist()
        custom.patch_namespaced_custom_object(
            c.GROUP, c.VERSION, namespace, c.PLURAL, "grpo", {"metadata": {"labels": {"x": "y"}}}
        )

        controller.process(key)

        assert core.list_namespaced_pod(namespace).items == []
        assert "attemptCreationTime" not in (get_job(api_client, namespace).get("status") or {})
        assert controller.queue.get(timeout=0) == key  # asked to pass again at once
        controller.queue.done(key)
        controller.process(key)
        pods = core.list_namespaced_pod(namespace).items
        assert sorted(p.metadata.name for p in pods) == ["grpo-a0-n0", "grpo-a0-n1"]
        if kube.serves_workload_api:
            groups = custom.list_namespaced_custom_object(
                c.SCHEDULING_GROUP, c.SCHEDULING_VERSION, namespace, "podgroups"
            )["items"]
            assert [g["metadata"]["name"] for g in groups] == ["grpo-a0"]
            assert get_job(api_client, namespace)["status"]["podGroup"] == "grpo-a0"
    finally:
        custom.delete_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, "grpo")
        controller.relist()
        controller.process(key)


def test_a_pass_right_after_creating_the_gang_sees_it_before_any_watch_event(
    api_client, core, namespace, crd, nodes
):
    """The pods a pass creates go into the cache from the API server's answer: a pass that
    came before their watch events would otherwise take them for deleted (PodDeleted) and
    start another attempt. This controller has no watch at all."""
    kube = Kube(api_client)
    controller = Controller(kube, CheckpointFinder({}, "unused"), [namespace])
    key = (namespace, "grpo")
    body = test_recovery.job_body(
        nodes, checkpoint={"resume": "never"}, restartPolicy={"maxFailures": 0}
    )
    create(api_client, namespace, body)
    try:
        controller.relist()
        controller.process(key)
        controller.process(key)
        job = get_job(api_client, namespace)
        assert (job["status"]["attempt"], job["status"].get("preemptions", 0)) == (0, 0)
        assert sorted(p["metadata"]["name"] for p in controller.cache.view(namespace, "grpo").pods) == [
            "grpo-a0-n0", "grpo-a0-n1"]  # fmt: skip
    finally:
        client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
            c.GROUP, c.VERSION, namespace, c.PLURAL, "grpo"
        )
        controller.relist()
        controller.process(key)


def test_a_resume_lists_again_soon_and_drops_a_pod_deleted_after_the_first_list(
    api_client, core, namespace, crd, monkeypatch
):
    """A replica that resumes lists everything, then lists again shortly: what was deleted
    between the first list and the start of the watches would otherwise stay in its cache.
    The second list comes when it is due, not at the next periodic resync. This controller
    has no watch, so only its lists show it the pod."""
    monkeypatch.setattr(controller_module, "RELIST_AFTER_START_SECONDS", 0.5)
    kube = Kube(api_client)
    controller = Controller(kube, CheckpointFinder({}, "unused"), [namespace],
                            resync_seconds=3600, relist_seconds=3600)  # fmt: skip
    labels = {c.LABEL_MANAGED_BY: c.MANAGED_BY, c.LABEL_JOB: "ghost"}
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="ghost-a0-n0", labels=labels),
        spec=client.V1PodSpec(containers=[client.V1Container(name="trainer", image="busybox")]),
    )
    lists_done = []
    relist = controller.relist

    def counted_relist() -> None:
        relist()
        lists_done.append(time.monotonic())

    monkeypatch.setattr(controller, "relist", counted_relist)
    controller.start()
    try:
        # The second list after the start is done; the next is an hour away.
        wait_for(lambda: len(lists_done) >= 2, timeout=5, what="the second list after the start")
        controller.pause()
        core.create_namespaced_pod(namespace, pod)
        controller.resume()
        assert controller.cache.view(namespace, "ghost").pods  # the first list saw it

        core.delete_namespaced_pod("ghost-a0-n0", namespace, grace_period_seconds=0)

        wait_for(lambda: not controller.cache.view(namespace, "ghost").pods, timeout=5,
                 what="the second list to drop the deleted pod")  # fmt: skip
    finally:
        controller.stop()


def test_a_priority_class_deleted_while_the_watch_was_away_leaves_the_cache_at_the_relist(
    api_client, namespace, crd
):
    """The boosts' ceilings read the classes from the cache, which the watches keep: one
    deleted while a watch was reconnecting sends no event. The relist (at start, every
    RELIST_SECONDS, on resume) replaces them from full lists; a cluster without Kueue's
    WorkloadPriorityClass API is no error."""
    scheduling = client.SchedulingV1Api(api_client)
    name = f"between-{namespace}"
    scheduling.create_priority_class(
        client.V1PriorityClass(metadata=client.V1ObjectMeta(name=name), value=120)
    )
    controller = Controller(Kube(api_client), CheckpointFinder({}, "unused"), [namespace])
    try:
        controller.relist()
        assert controller.cache.priority_classes()[c.POD_PRIORITY_GROUP][name] == 120
    finally:
        scheduling.delete_priority_class(name)  # no watch runs here: the cache hears nothing
    assert name in controller.cache.priority_classes()[c.POD_PRIORITY_GROUP]

    controller.relist()

    classes = controller.cache.priority_classes()
    assert name not in classes[c.POD_PRIORITY_GROUP]
    assert classes[c.POD_PRIORITY_GROUP]["system-node-critical"] == 2000001000
    assert classes[c.KUEUE_GROUP] == {}  # this cluster serves no Kueue API
