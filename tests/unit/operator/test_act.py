"""How a pass carries out its plan (reconcile.act.apply): the writes in their order, each
answer in the cache, and a plan that asks for nothing writes nothing (reconcile.plan.Plan)."""

from __future__ import annotations

import itertools
import threading
from dataclasses import fields

import pytest
from rljob_operator import constants as c
from rljob_operator.api.reasons import EventType
from rljob_operator.api.status import BoostBasis, JobStatus
from rljob_operator.reconcile.act import apply
from rljob_operator.reconcile.boost.memory import BoostMemory
from rljob_operator.reconcile.plan import Event, Plan
from rljob_operator.runtime.cache import ClusterCache

JOB = {"metadata": {"namespace": "ns", "name": "j", "uid": "u", "resourceVersion": "5"},
       "status": JobStatus().to_dict()}  # fmt: skip
BASIS = BoostBasis(3, 60.0, 8, 30.0, 10.0, "2026-01-01T00:00:00Z")


class RecordingKube:
    """Answers as the API server would, and notes what each request did, in the order they
    came (a batch's requests come from several threads)."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self._lock = threading.Lock()
        self._revisions = itertools.count(10)

    def _note(self, what: str) -> str:
        with self._lock:
            self.sent.append(what)
            return str(next(self._revisions))

    def _pod(self, what: str, name: str, finalizers: tuple[str, ...] = (c.FINALIZER,)) -> dict:
        meta = {"namespace": "ns", "name": name, "resourceVersion": self._note(what),
                "labels": {c.LABEL_JOB: "j"}, "finalizers": list(finalizers)}  # fmt: skip
        return {"metadata": meta}

    def patch_status(self, namespace, name, patch, revision):
        what = "status" if patch else "fence"
        return {**JOB, "metadata": {**JOB["metadata"], "resourceVersion": self._note(what)}}

    def create(self, obj):
        stored = {**obj, "metadata": {**obj["metadata"]}}
        stored["metadata"]["resourceVersion"] = self._note(f"create {obj['metadata']['name']}")
        return stored

    def release_pod(self, namespace, name):
        return self._pod(f"release {name}", name, finalizers=())

    def delete_pod(self, namespace, name, grace_seconds=None):
        return self._pod(f"delete {name}", name)

    def annotate_pod(self, namespace, name, key, value):
        return self._pod(f"ask {name}", name)

    def patch_pod_metadata(self, namespace, name, metadata):
        return self._pod(f"patch {name}", name)

    def delete_pod_group(self, namespace, name):
        self._note(f"delete group {name}")

    def annotate_kueue_workload(self, namespace, name, annotations):
        meta = {"namespace": namespace, "name": name, "resourceVersion": self._note("boost")}
        return {"metadata": meta}

    def delete_job(self, namespace, name):
        self._note("delete job")


def full_plan() -> Plan:
    owner = [{"uid": "u", "controller": True}]
    service = {"kind": "Service", "metadata": {"namespace": "ns", "name": "j", "labels": {
        c.LABEL_JOB: "j"}, "ownerReferences": owner}}  # fmt: skip
    new_pod = {"kind": "Pod", "metadata": {"namespace": "ns", "name": "j-new", "labels": {
        c.LABEL_JOB: "j"}}}  # fmt: skip
    return Plan(
        status=JobStatus(attempt=1), create=[service, new_pod], delete=["j-del"],
        force_delete=["j-gone"], request_checkpoint=["j-asked"], release=["j-rel"],
        delete_pod_groups=["j-a0"], stop_in_place={"j-stop": {}}, run_in_place={"j-kept": {}},
        annotate_workload=("j-a1", {"boost": "3"}, BASIS),
        events=[Event(EventType.NORMAL, "Why", "what")], delete_job=True,
    )  # fmt: skip


# Each request's step in apply's order; the requests of one step go out together.
STEP = {"fence": 0, "create j": 0, "create j-new": 1, "patch j-kept": 1, "status": 2,
        "release j-rel": 3, "delete j-del": 3, "delete j-gone": 3, "ask j-asked": 3,
        "delete group j-a0": 3, "patch j-stop": 3, "boost": 4, "event": 5, "delete job": 6}  # fmt: skip


def test_the_writes_go_out_in_their_order_and_their_answers_into_the_cache():
    kube, cache = RecordingKube(), ClusterCache()
    cache.on_job(None, JOB)
    apply(kube, cache, BoostMemory(), JOB, full_plan(), lambda *e: kube._note("event"))
    assert sorted(kube.sent) == sorted(STEP)
    steps = [STEP[what] for what in kube.sent]
    assert steps == sorted(steps)
    view = cache.view("ns", "j")
    assert view.job["metadata"]["resourceVersion"] == str(10 + kube.sent.index("status"))
    # A deleted pod without our finalizer may be gone already: it is left to the watch.
    kept = {"j-new", "j-kept", "j-rel", "j-del", "j-gone", "j-asked", "j-stop"}
    assert {p["metadata"]["name"] for p in view.pods} == kept
    assert view.shared == {("Service", "j")}
    assert cache.kueue("ns", "j-a1").workload is not None


def test_the_releases_of_ends_recorded_before_go_out_beside_the_fence():
    kube = RecordingKube()
    plan = Plan(status=JobStatus(), release=["j-rel"], release_first=True,
                create=[{"kind": "Pod", "metadata": {"namespace": "ns", "name": "j-new"}}])  # fmt: skip
    apply(kube, ClusterCache(), BoostMemory(), JOB, plan, lambda *e: None)
    assert set(kube.sent[:2]) == {"fence", "release j-rel"}
    assert kube.sent[2:] == ["create j-new"]


def test_every_field_of_a_plan_asks_for_a_write_or_only_steers():
    """A field added to the plan must be named in Plan.ASKS or Plan.STEERS: a write the plan
    asks for that `asks_for_nothing` does not see would never be made."""
    named = {f.name for f in fields(Plan)} - {"status"}
    assert named == Plan.ASKS | Plan.STEERS
    assert not Plan.ASKS & Plan.STEERS


@pytest.mark.parametrize("name", sorted(Plan.ASKS))
def test_a_plan_asks_for_something_where_any_write_is_set(name):
    plan = full_plan()
    only = Plan(status=plan.status, **{name: getattr(plan, name)})
    assert not only.asks_for_nothing()


def test_a_plan_that_only_steers_asks_for_nothing_and_writes_nothing():
    kube = RecordingKube()
    plan = Plan(status=JobStatus(), requeue_after=5.0,
                needs_checkpoint_lookup=True, release_first=True)  # fmt: skip
    assert plan.asks_for_nothing()
    apply(kube, ClusterCache(), BoostMemory(), JOB, plan, lambda *e: kube._note("event"))
    assert kube.sent == []
