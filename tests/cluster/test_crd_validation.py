"""The API server itself refuses bad RLTrainingJobs, with messages that name the field."""

from __future__ import annotations

import copy
import json
import subprocess

import pytest
from kube_steps import wait_for
from kubernetes import client
from kubernetes.client.rest import ApiException
from rljob_operator import constants as c
from rljob_testenv import binaries

VALID = {
    "apiVersion": c.API_VERSION,
    "kind": c.KIND,
    "metadata": {"name": "valid"},
    "spec": {"image": "rljob-trainer:dev", "nnodes": 2},
}


def with_spec(**changes):
    body = copy.deepcopy(VALID)
    for dotted, value in changes.items():
        target = body["spec"]
        *parents, leaf = dotted.split("__")
        for key in parents:
            target = target.setdefault(key, {})
        if value is None:
            target.pop(leaf, None)
        else:
            target[leaf] = value
    return body


INVALID = [
    (with_spec(image=None), "spec.image"),
    (with_spec(framework="tensorflow"), "spec.framework"),
    (with_spec(backend="deepspeed"), "spec.backend"),
    (with_spec(nnodes=0), "spec.nnodes"),
    (with_spec(nprocPerNode=65), "spec.nprocPerNode"),
    (with_spec(rendezvousPort=80), "spec.rendezvousPort"),
    (with_spec(framework="custom"), "spec.command"),
    (with_spec(checkpoint__resume="latest"), "spec.checkpoint.resume"),
    (with_spec(checkpoint__resume="/elsewhere/global_step_10"), "spec.checkpoint.resume"),
    (with_spec(checkpoint__resume="/checkpoints/global_step_10/"), "spec.checkpoint.resume"),
    (with_spec(checkpoint__mountPath="checkpoints"), "spec.checkpoint.mountPath"),
    (with_spec(checkpoint__directory="/abs/dir"), "spec.checkpoint.directory"),
    (with_spec(checkpoint__layout="orbax"), "spec.checkpoint.layout"),
    (with_spec(checkpoint__saveInterval=0), "spec.checkpoint.saveInterval"),
    (with_spec(checkpoint__resumeArgsTemplate="--resume {path}"), "spec.checkpoint.resumeArgsTemplate"),
    (with_spec(restartPolicy__maxFailures=-1), "spec.restartPolicy.maxFailures"),
    (with_spec(restartPolicy__retryableExitCodes=[0]), "spec.restartPolicy.retryableExitCodes"),
    (with_spec(restartPolicy__failureBackoffSeconds=60, restartPolicy__maxFailureBackoffSeconds=10),
     "spec.restartPolicy.maxFailureBackoffSeconds"),
    (dict(VALID, metadata={"name": "x" * 49}), "metadata.name"),
    # Bad input that used to be accepted and fail later (issue #17).
    (with_spec(checkpoint__directory="../outside"), "spec.checkpoint.directory"),
    (with_spec(checkpoint__directory="run/../../../../etc"), "spec.checkpoint.directory"),
    (with_spec(checkpoint__resume="/checkpoints/../etc/global_step_1"), "spec.checkpoint.resume"),
    (with_spec(checkpoint__mountPath="/"), "spec.checkpoint.mountPath"),
    (with_spec(checkpoint__mountPath="/etc"), "spec.checkpoint.mountPath"),
    (with_spec(checkpoint__mountPath="/tmp/ray"), "spec.checkpoint.mountPath"),
    (with_spec(checkpoint__mountPath="/data/../etc"), "spec.checkpoint.mountPath"),
    (with_spec(command=[""]), "spec.command[0]"),
    (dict(VALID, metadata={"name": "my.job"}), "metadata.name"),
    # The Ray launcher (the default for rlinf and verl).
    (with_spec(launcher="mpirun"), "spec.launcher"),
    (with_spec(framework="verl", command=["python", "-m", "verl.trainer.main_ppo"], nprocPerNode=8), "spec.nprocPerNode"),
    (with_spec(framework="custom", command=["python", "d.py"], launcher="ray", nprocPerNode=2), "spec.nprocPerNode"),
    (with_spec(framework="rlinf", command=["python", "main_grpo.py"], rendezvousPort=6379), "spec.ray"),
    (with_spec(framework="rlinf", command=["python", "main_grpo.py"], ray__dashboardPort=29500), "spec.ray"),
    (with_spec(framework="verl", command=["python", "x.py"], ray__port=8265), "spec.ray"),
    (with_spec(framework="custom", launcher="ray"), "spec.command"),
    (with_spec(framework="verl", command=["python", "x.py"], ray__startArgs=["--address=other:6379"]), "spec.ray.startArgs[0]"),
    (with_spec(framework="verl", command=["python", "x.py"], ray__joinTimeoutSeconds=0), "spec.ray.joinTimeoutSeconds"),
    # Kueue's priority boost (issue #25): bounded, so that it fits Kueue's 32-bit value.
    (with_spec(queueing__priorityBoost__maxBoost=-1), "spec.queueing.priorityBoost.maxBoost"),
    (with_spec(queueing__priorityBoost__maxBoost=1_000_001), "spec.queueing.priorityBoost.maxBoost"),
    (with_spec(queueing__priorityBoost__gpuSecondsPerPoint=0), "spec.queueing.priorityBoost.gpuSecondsPerPoint"),
    (with_spec(queueing__priorityBoost__minIntervalSeconds=0), "spec.queueing.priorityBoost.minIntervalSeconds"),
    (with_spec(queueing__priorityBoost__enabled="yes"), "spec.queueing.priorityBoost.enabled"),
    # The pod template is a PodSpec, with the parts that are rljob's refused (issue #14).
    (with_spec(template__spec__restartPolicy="OnFailure"), "spec.template.spec.restartPolicy"),
    (with_spec(template__spec__hostname="mine"), "spec.template.spec.hostname"),
    (with_spec(template__spec__containers=[{"name": "a"}, {"name": "b"}]), "spec.template.spec.containers"),
    (with_spec(template__spec__containers=[{"image": "x"}]), "spec.template.spec.containers[0].name"),
    (with_spec(template__spec__containers=[{"name": "trainer", "ports": [{"containerPort": "x"}]}]),
     "spec.template.spec.containers[0].ports[0].containerPort"),
    (with_spec(template__spec__hostNetwork="yes"), "spec.template.spec.hostNetwork"),
    (with_spec(template__spec__containerSecurityContext={"privileged": True}), "spec.template.spec.containerSecurityContext"),
]  # fmt: skip


def create(api_client, namespace, body, dry_run="All"):
    return client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, body, dry_run=dry_run
    )


@pytest.mark.parametrize(("body", "field"), INVALID, ids=[f for _, f in INVALID])
def test_invalid_job_is_rejected_naming_the_field(api_client, namespace, crd, body, field):
    with pytest.raises(ApiException) as raised:
        create(api_client, namespace, body)

    assert raised.value.status == 422
    assert field in json.loads(raised.value.body)["message"]


def test_valid_job_is_accepted_with_defaults(api_client, namespace, crd):
    job = create(api_client, namespace, VALID)

    spec = job["spec"]
    assert (spec["framework"], spec["backend"], spec["nprocPerNode"]) == ("rljob", "fsdp", 1)
    assert spec["checkpoint"] == {
        "mountPath": "/checkpoints", "layout": "auto", "verify": "quick", "resume": "auto"
    }  # fmt: skip
    assert spec["restartPolicy"]["maxFailures"] == 3


def test_the_priority_boost_is_defaulted_off_with_its_bounds(api_client, namespace, crd):
    job = create(api_client, namespace, with_spec(queueing__priorityBoost__enabled=False))
    assert job["spec"]["queueing"]["priorityBoost"] == {
        "enabled": False, "gpuSecondsPerPoint": 3600, "minStep": 1,
        "minIntervalSeconds": 300,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"image": "other:2"}, "spec.image"),
        ({"nnodes": 4}, "spec.nnodes"),
        ({"command": ["python", "x.py"]}, "spec.command"),
        ({"launcher": "ray"}, "spec.launcher"),
    ],
)
def test_fields_that_shape_the_gang_are_immutable(api_client, namespace, crd, change, field):
    create(api_client, namespace, VALID, dry_run=None)
    api = client.CustomObjectsApi(api_client)

    with pytest.raises(ApiException) as raised:
        api.patch_namespaced_custom_object(
            c.GROUP, c.VERSION, namespace, c.PLURAL, "valid", {"spec": change}
        )

    assert raised.value.status == 422
    assert field in json.loads(raised.value.body)["message"]
    # What may change, changes.
    api.patch_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, "valid",
                                       {"spec": {"suspend": True, "restartPolicy": {"maxFailures": 5}}})  # fmt: skip


def test_a_json_patch_cannot_remove_the_checkpoint_volume(kubeconfig, api_client, namespace, crd):
    """Removal bypasses a rule on the field itself; the rule on its parent catches it."""
    body = with_spec(checkpoint__volume={"persistentVolumeClaim": {"claimName": "ckpts"}})
    create(api_client, namespace, body, dry_run=None)

    for path in ("/spec/checkpoint/volume", "/spec/checkpoint"):
        patched = subprocess.run(
            [str(binaries.require("kubectl")), "--kubeconfig", str(kubeconfig), "-n", namespace,
             "patch", "rltj", "valid", "--type", "json", "-p", json.dumps([{"op": "remove", "path": path}])],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert patched.returncode != 0
        assert "spec.checkpoint.volume is immutable" in patched.stderr
    job = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, "valid"
    )
    assert job["spec"]["checkpoint"]["volume"] == {"persistentVolumeClaim": {"claimName": "ckpts"}}


def test_kubectl_explain_describes_the_checkpoint_fields(kubeconfig, crd):
    def explain():  # the API server publishes a new CRD's OpenAPI a moment after it is Established
        return subprocess.run(
            [str(binaries.require("kubectl")), "--kubeconfig", str(kubeconfig), "explain", "rltj.spec.checkpoint"],
            capture_output=True, text=True, check=False,
        ).stdout  # fmt: skip

    out = wait_for(explain, what="kubectl explain to know the CRD")

    assert "global_step_N" in out
    for field in ("mountPath", "resume", "saveInterval", "maxToKeep", "volume"):
        assert field in out


def test_kubectl_explain_describes_the_pod_template_as_a_pod_spec(kubeconfig, crd):
    def explain(field):
        return subprocess.run(
            [str(binaries.require("kubectl")), "--kubeconfig", str(kubeconfig), "explain", f"rltj.spec.template.spec.{field}"],
            capture_output=True, text=True, check=False,
        ).stdout  # fmt: skip

    assert "Must be Never" in wait_for(lambda: explain("restartPolicy"), what="kubectl explain")
    assert "host's network namespace" in explain("hostNetwork")
    assert "environment variables to set in the container" in explain("containers.env")


def test_kubectl_get_shows_the_printer_columns(kubeconfig, api_client, namespace, crd):
    create(api_client, namespace, VALID, dry_run=None)

    out = subprocess.run(
        [str(binaries.require("kubectl")), "--kubeconfig", str(kubeconfig), "get", "rltj", "-n", namespace],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip

    header = out.splitlines()[0].split()
    assert header == [
        "NAME", "PHASE", "CHECKPOINT", "ATTEMPT", "PREEMPTIONS", "FAILURES", "RAY", "NODES",
        "DRIVER", "ETTR", "AGE",
    ]  # fmt: skip
