"""The watch cache: revisions only move forward, full lists replace, nodes wake their jobs."""

from __future__ import annotations

from rljob_operator import constants as c
from rljob_operator.preemption.nodes import RESTART_RULES_FEATURE
from rljob_operator.runtime.cache import DELETED, ClusterCache, JobView


def job(name: str, rv: int, attempt: int = 0, namespace: str = "ns") -> dict:
    return {
        "metadata": {"namespace": namespace, "name": name, "resourceVersion": str(rv)},
        "status": {"attempt": attempt},
    }


def pod(name: str, job_name: str, node: str | None, rv: int = 1, namespace: str = "ns") -> dict:
    return {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "resourceVersion": str(rv),
            "labels": {c.LABEL_JOB: job_name, c.LABEL_ROLE: c.ROLE_TRAINER},
        },
        "spec": {"nodeName": node} if node else {},
    }


def node(name: str, ready: str, rv: int = 1, heartbeat: str = "t0") -> dict:
    return {
        "metadata": {"name": name, "resourceVersion": str(rv)},
        "status": {
            "conditions": [{"type": "Ready", "status": ready, "lastHeartbeatTime": heartbeat}]
        },
    }


def test_a_late_event_never_moves_a_job_back_to_an_older_revision():
    cache = ClusterCache()
    cache.on_job(None, job("a", 10, attempt=2))  # our own write, returned by the API server
    cache.on_job("MODIFIED", job("a", 9, attempt=1))  # the watch's older event, late
    assert cache.view("ns", "a").job["status"]["attempt"] == 2
    cache.on_job("MODIFIED", job("a", 11, attempt=3))
    assert cache.view("ns", "a").job["status"]["attempt"] == 3
    cache.on_job(DELETED, job("a", 12))
    assert cache.view("ns", "a").job is None


def test_pods_are_found_by_their_job_and_their_event_names_the_job():
    cache = ClusterCache()
    assert cache.on_pod("ADDED", pod("a-n1", "a", "n1")) == ("ns", "a")
    cache.on_pod("ADDED", pod("a-n0", "a", "n0"))
    cache.on_pod("ADDED", pod("b-n0", "b", "n0"))
    cache.on_pod("ADDED", pod("a-n0", "a", "n0", namespace="other"))
    assert [p["metadata"]["name"] for p in cache.view("ns", "a").pods] == ["a-n0", "a-n1"]
    cache.on_pod(DELETED, pod("a-n1", "a", "n1"))
    assert [p["metadata"]["name"] for p in cache.view("ns", "a").pods] == ["a-n0"]


def test_our_own_write_that_returns_after_the_deleted_event_brings_no_ghost_back():
    cache = ClusterCache()
    cache.on_pod("ADDED", pod("a-n0", "a", "n0", rv=5))
    cache.on_pod(DELETED, pod("a-n0", "a", "n0", rv=7))  # the release let it go
    cache.on_pod(None, pod("a-n0", "a", "n0", rv=6))  # the release's reply, late
    assert cache.view("ns", "a").pods == []
    cache.on_pod("ADDED", pod("a-n0", "a", "n0", rv=9))  # made again under the same name
    assert [p["metadata"]["resourceVersion"] for p in cache.view("ns", "a").pods] == ["9"]
    # A full list of one namespace says nothing of another's deletions.
    cache.on_pod(DELETED, pod("b-n0", "b", "n0", rv=11, namespace="other"))
    cache.replace_pods([], "20", "ns")
    cache.on_pod(None, pod("b-n0", "b", "n0", rv=10, namespace="other"))
    assert cache.view("other", "b").pods == []


def test_a_node_wakes_only_the_jobs_with_pods_there_and_only_when_readiness_changes():
    cache = ClusterCache()
    cache.on_pod("ADDED", pod("a-n0", "a", "n0"))
    cache.on_pod("ADDED", pod("b-n1", "b", "n1"))
    cache.on_pod("ADDED", pod("c-pending", "c", None))
    assert cache.on_node(None, node("n0", "True")) == [("ns", "a")]  # first seen
    assert cache.on_node("MODIFIED", node("n0", "True", rv=2, heartbeat="t1")) == []
    assert cache.on_node("MODIFIED", node("n0", "Unknown", rv=3)) == [("ns", "a")]
    assert cache.on_node("MODIFIED", node("n0", "Unknown", rv=2)) == []  # stale
    assert cache.on_node(DELETED, node("n0", "Unknown", rv=4)) == [("ns", "a")]
    assert cache.view("ns", "a").nodes == {"n0": None}  # its pod's node is gone


def test_a_view_counts_the_nodes_that_take_an_in_place_pod_as_their_events_and_lists_say():
    def declaring(name: str, ready: str, rv: int = 1) -> dict:
        made = node(name, ready, rv)
        made["status"]["declaredFeatures"] = [RESTART_RULES_FEATURE]
        return made

    cache = ClusterCache()
    cache.on_job(None, job("a", 1))
    cache.on_node(None, declaring("n0", "True"))
    cache.on_node(None, declaring("n1", "True"))
    cache.on_node(None, node("n2", "True"))  # an older kubelet
    assert cache.view("ns", "a").in_place_nodes == 2
    cache.on_node("MODIFIED", declaring("n1", "Unknown", rv=2))
    assert cache.view("ns", "a").in_place_nodes == 1
    cordoned = declaring("n0", "True", rv=2)
    cordoned["spec"] = {"unschedulable": True}
    cache.on_node("MODIFIED", cordoned)
    assert cache.view("ns", "a").in_place_nodes == 0
    cache.replace_nodes([declaring("n0", "True", rv=3), declaring("n3", "True")], "10")
    assert cache.view("ns", "a").in_place_nodes == 2  # n1 went while the watch was away
    cache.on_node(DELETED, declaring("n3", "True", rv=11))
    assert cache.view("ns", "a").in_place_nodes == 1


def test_a_termination_notice_on_a_node_wakes_its_jobs_at_once():
    """The early warning cannot wait for the periodic resync: GKE gives a spot VM 30 s."""
    cache = ClusterCache()
    cache.on_pod("ADDED", pod("a-n0", "a", "n0"))
    assert cache.on_node(None, node("n0", "True")) == [("ns", "a")]
    tainted = node("n0", "True", rv=2)
    tainted["spec"] = {"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}
    assert cache.on_node("MODIFIED", tainted) == [("ns", "a")]
    tainted["metadata"]["resourceVersion"] = "3"
    assert cache.on_node("MODIFIED", tainted) == []  # nothing a job reads changed
    annotated = node("n0", "True", rv=4)
    annotated["spec"] = tainted["spec"]
    annotated["metadata"]["annotations"] = {c.NODE_TERMINATION_TIME: "2026-11-29T12:00:45Z"}
    assert cache.on_node("MODIFIED", annotated) == [("ns", "a")]  # now it says when


def test_a_full_list_drops_what_went_while_the_watch_was_away_but_keeps_newer_entries():
    cache = ClusterCache()
    cache.on_job(None, job("gone", 5))
    cache.on_job(None, job("kept", 6))
    cache.on_job(None, job("newer", 30))  # created after the list was made
    cache.on_job(None, job("elsewhere", 5, namespace="other"))
    changed = cache.replace_jobs([job("kept", 6), job("new", 7)], "20", namespace="ns")
    assert changed == {("ns", "gone"), ("ns", "new")}
    assert cache.job_keys() == [
        ("ns", "kept"),
        ("ns", "new"),
        ("ns", "newer"),
        ("other", "elsewhere"),
    ]


def test_a_full_list_of_pods_names_the_jobs_whose_pods_changed():
    cache = ClusterCache()
    cache.on_pod(None, pod("a-n0", "a", "n0", rv=3))
    cache.on_pod(None, pod("b-n0", "b", "n0", rv=3))
    changed = cache.replace_pods([pod("b-n0", "b", "n0", rv=3), pod("c-n0", "c", "n0", rv=4)], "9")
    assert changed == {("ns", "a"), ("ns", "c")}
    assert cache.view("ns", "a").pods == []


def test_a_jobs_shared_children_are_known_by_kind_and_name_until_they_go():
    cache = ClusterCache()
    service, config_map = pod("a", "a", None, rv=2), pod("a-launcher", "a", None, rv=3)
    cache.on_shared("Service", "ADDED", service)
    cache.on_shared("ConfigMap", None, config_map)  # our own create
    cache.on_shared("Service", "ADDED", pod("b", "b", None))
    cache.on_shared("Workload", "ADDED", pod("a", "a", None, namespace="other"))
    assert cache.view("ns", "a").shared == {("Service", "a"), ("ConfigMap", "a-launcher")}
    cache.on_shared("Service", DELETED, pod("a", "a", None, rv=4))
    assert cache.view("ns", "a").shared == {("ConfigMap", "a-launcher")}
    cache.on_shared("Service", None, service)  # a create of ours that returns late: no ghost
    assert cache.view("ns", "a").shared == {("ConfigMap", "a-launcher")}
    assert cache.view("other", "a").shared == {("Workload", "a")}


def test_a_full_list_of_shared_children_drops_those_deleted_while_the_watch_was_away():
    cache = ClusterCache()
    cache.on_shared("Service", "ADDED", pod("a", "a", None, rv=2))
    cache.on_shared("Service", "ADDED", pod("b", "b", None, rv=2))
    cache.on_shared("ConfigMap", "ADDED", pod("a-launcher", "a", None, rv=2))
    cache.replace_shared("Service", [pod("b", "b", None, rv=2), pod("c", "c", None, rv=5)], "9")
    assert cache.view("ns", "a").shared == {("ConfigMap", "a-launcher")}  # the other kind stays
    assert cache.view("ns", "b").shared == {("Service", "b")}
    assert cache.view("ns", "c").shared == {("Service", "c")}


def kueue_workload(name: str, quota: tuple[str, str, str] | None) -> dict:
    """A Kueue Workload with its QuotaReserved condition (status, reason, message), if any."""
    conditions = []
    if quota:
        status, reason, message = quota
        conditions = [{"type": "QuotaReserved", "status": status, "reason": reason,
                       "message": message}]  # fmt: skip
    return {"metadata": {"namespace": "ns", "name": name}, "status": {"conditions": conditions}}


def test_kueue_says_why_a_pod_group_waits_and_wakes_its_job_only_when_that_changes():
    cache = ClusterCache()
    cache.on_job(None, job("grpo-a1", 1))  # a job whose own name looks like an attempt's
    inadmissible = ("False", "Inadmissible", "LocalQueue team doesn't exist")

    assert cache.on_admission("ADDED", kueue_workload("grpo-a1-a0", inadmissible)) == (
        "ns", "grpo-a1",
    )  # fmt: skip
    waits = ("Inadmissible", "LocalQueue team doesn't exist")
    assert cache.kueue("ns", "grpo-a1-a0").admission == waits
    assert cache.view("ns", "grpo-a1").kueue.admission == waits  # of its attempt 0, in the view
    assert cache.on_admission("MODIFIED", kueue_workload("grpo-a1-a0", inadmissible)) is None

    admitted = kueue_workload("grpo-a1-a0", ("True", "QuotaReserved", "Quota reserved"))
    assert cache.on_admission("MODIFIED", admitted) == ("ns", "grpo-a1")
    assert cache.kueue("ns", "grpo-a1-a0").admission is None

    assert cache.on_admission("ADDED", kueue_workload("other-a0", inadmissible)) is None  # no job
    assert cache.on_admission("ADDED", kueue_workload("pod-1234", inadmissible)) is None


def test_with_the_jobs_uid_only_the_shared_children_it_controls_count():
    """A ConfigMap that carries the job's label but was made by someone else is left out: the
    pass creates the job's own, and its create finds who owns the one there."""
    cache = ClusterCache()
    ours, planted = pod("a-launcher", "a", None, rv=2), pod("a", "a", None, rv=3)
    ours["metadata"]["ownerReferences"] = [{"uid": "uid-a", "controller": True, "name": "a"}]
    planted["metadata"]["ownerReferences"] = [{"uid": "uid-b", "controller": True, "name": "b"}]
    cache.on_shared("ConfigMap", "ADDED", ours)
    cache.on_shared("Service", "ADDED", planted)
    assert cache.view("ns", "a").shared == {("ConfigMap", "a-launcher"), ("Service", "a")}
    owner = job("a", 1)  # the job in the cache: only what its uid controls counts
    owner["metadata"]["uid"] = "uid-a"
    cache.on_job(None, owner)
    assert cache.view("ns", "a").shared == {("ConfigMap", "a-launcher")}


def test_a_pass_reads_the_job_its_pods_what_it_owns_and_its_trainers_nodes_in_one_view():
    """Inspectors' nodes are not the job's; a node the cache lacks is named, as None."""
    cache = ClusterCache()
    owned = job("a", 1)
    owned["metadata"]["uid"] = "uid-a"
    cache.on_job(None, owned)
    cache.on_pod("ADDED", pod("a-n0", "a", "n0"))
    cache.on_pod("ADDED", pod("a-n1", "a", "n1"))
    inspector = pod("a-inspect", "a", "n2")
    inspector["metadata"]["labels"][c.LABEL_ROLE] = c.ROLE_INSPECTOR
    cache.on_pod("ADDED", inspector)
    cache.on_node(None, node("n0", "True"))
    cache.on_node(None, node("n2", "True"))
    service = pod("a", "a", None)
    service["metadata"]["ownerReferences"] = [{"uid": "uid-a", "controller": True, "name": "a"}]
    cache.on_shared("Service", "ADDED", service)
    cache.on_shared("ConfigMap", "ADDED", pod("a-launcher", "a", None))  # not controlled by a

    view = cache.view("ns", "a")
    assert view.job == owned
    assert [p["metadata"]["name"] for p in view.pods] == ["a-inspect", "a-n0", "a-n1"]
    assert view.shared == {("Service", "a")}
    assert set(view.nodes) == {"n0", "n1"} and view.nodes["n1"] is None
    assert view.nodes["n0"]["metadata"]["name"] == "n0"
    assert cache.view("ns", "gone") == JobView(None, [], frozenset(), {})
