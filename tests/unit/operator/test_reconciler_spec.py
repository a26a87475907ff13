"""The pass checks a job's spec (parsing, and the template rendered once) once per uid and
metadata.generation (reconcile.run.Reconciler.checked_spec), not on every pass."""

from __future__ import annotations

import copy

from builders import make_job
from rljob_operator.api.spec import SpecError
from rljob_operator.reconcile.run import Reconciler


def reconciler() -> Reconciler:
    return Reconciler(kube=None, cache=None, finder=None, tell=lambda *event: None)  # unused


def test_one_generation_is_checked_once_and_a_new_one_again():
    passes = reconciler()
    job = make_job(nnodes=2)
    first = passes.checked_spec(job)
    assert first.nnodes == 2
    assert passes.checked_spec(copy.deepcopy(job)) is first  # the same generation: kept
    job["spec"]["nnodes"] = 3
    job["metadata"]["generation"] = 2
    assert passes.checked_spec(job).nnodes == 3


def test_a_job_made_again_under_the_same_name_is_checked_again():
    passes = reconciler()
    job = make_job(nnodes=2)
    passes.checked_spec(job)
    again = make_job(nnodes=4)
    again["metadata"]["uid"] = "uid-2"  # generation 1 again, another object
    assert passes.checked_spec(again).nnodes == 4


def test_a_refused_spec_is_kept_for_its_generation_and_a_fixed_one_is_taken():
    passes = reconciler()
    job = make_job(template={"spec": {"containers": [{"name": "trainer", "command": ["x"]}]}})
    refused = passes.checked_spec(job)
    assert isinstance(refused, SpecError)
    assert passes.checked_spec(job) is refused
    job["spec"].pop("template")
    job["metadata"]["generation"] = 2
    assert not isinstance(passes.checked_spec(job), SpecError)
