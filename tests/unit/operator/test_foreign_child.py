"""A ConfigMap found under the name of the job's launcher ConfigMap is the job's own only when
the job controls it, it holds what rljob ships, and it is immutable (reconcile.act.not_ours)."""

from __future__ import annotations

import copy

import pytest
from builders import job_ref, make_job
from rljob_operator.api.spec import parse_spec
from rljob_operator.launcher.pods import desired_launcher_config_map
from rljob_operator.reconcile.act import not_ours

JOB = make_job(framework="verl", command=["python3", "-m", "verl.trainer.main_ppo"])


def wanted() -> dict:
    ref = job_ref(JOB)
    return desired_launcher_config_map(parse_spec(JOB["spec"]), ref)


def test_the_jobs_own_configmap_as_the_api_server_returns_it_is_ours():
    assert wanted()["immutable"] is True  # an edit never reaches the pods that mount it
    found = copy.deepcopy(wanted())
    found["metadata"].update(resourceVersion="7", uid="cm-uid")
    assert not_ours(found, wanted()) is None


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda cm: cm["metadata"].pop("ownerReferences"), "its controller is not the job"),
        (lambda cm: cm["metadata"]["ownerReferences"][0].update(uid="another"),
         "its controller is not the job"),
        (lambda cm: cm["data"].update({"rljob_ray_bridge.py": "import os"}),
         "its contents are not what rljob ships"),
        (lambda cm: cm.update(binaryData={"x": "AA=="}), "its contents are not what rljob ships"),
        # The same files, but anyone who may update ConfigMaps could change them under the pods.
        (lambda cm: cm.pop("immutable"), "it is not immutable: its contents could change under "
         "the pods"),
        (lambda cm: cm.update(immutable=False), "it is not immutable: its contents could change "
         "under the pods"),
    ],
    ids=["no-owner", "another-owner", "other-code", "more-files", "mutable", "immutable-false"],
)  # fmt: skip
def test_a_configmap_someone_else_made_or_changed_is_not_ours(change, why):
    found = copy.deepcopy(wanted())
    change(found)
    assert not_ours(found, wanted()) == why
