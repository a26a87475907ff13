"""An RLTrainingJob's life on the real control plane, under the real operator process.

kwok marks pods Running; the tests finish them the way a kubelet would, by writing
their status.
"""

from __future__ import annotations

import base64
import copy
import re

import pytest
from kube_steps import wait_for
from kubernetes import client
from kubernetes.client.rest import ApiException
from rljob_operator import constants as c
from rljob_operator.api.reasons import Phase

JOB = {
    "apiVersion": c.API_VERSION,
    "kind": c.KIND,
    "metadata": {"name": "grpo"},
    "spec": {
        "image": "rljob-trainer:dev",
        "nnodes": 2,
        "nprocPerNode": 1,
        "resources": {"limits": {"nvidia.com/gpu": 1}},
        "checkpoint": {"resume": "never"},
        "restartPolicy": {"maxFailures": 0},
    },
}


def jobs(api_client):
    return client.CustomObjectsApi(api_client)


def create_job(api_client, namespace, body=JOB):
    return jobs(api_client).create_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, body
    )


def get_job(api_client, namespace, name="grpo"):
    return jobs(api_client).get_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, name
    )


def patch_spec(api_client, namespace, spec, name="grpo"):
    return jobs(api_client).patch_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, name, {"spec": spec}
    )


def phase_is(api_client, namespace, phase, name="grpo"):
    job = get_job(api_client, namespace, name)
    return job if job.get("status", {}).get("phase") == phase else None


def trainer_pods(core, namespace):
    pods = core.list_namespaced_pod(
        namespace, label_selector=f"{c.LABEL_ROLE}={c.ROLE_TRAINER}"
    ).items
    return sorted(pods, key=lambda p: p.metadata.name)


def running_pods(core, namespace, count):
    pods = [p for p in trainer_pods(core, namespace) if p.status.phase == "Running"]
    return pods if len(pods) == count else None


def finish(core, namespace, pod_name, exit_code):
    """Report the trainer container's exit the way the kubelet does."""
    terminated = {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error"}
    core.patch_namespaced_pod_status(pod_name, namespace, {"status": {
        "phase": "Succeeded" if exit_code == 0 else "Failed",
        "containerStatuses": [{
            "name": c.TRAINER_CONTAINER, "image": "rljob-trainer:dev", "imageID": "", "ready": False,
            "restartCount": 0, "state": {"terminated": terminated},
        }],
    }})  # fmt: skip


def event_reasons(core, namespace):
    return {e.reason for e in core.list_namespaced_event(namespace).items}


def test_job_runs_a_gang_and_succeeds_when_every_pod_succeeds(
    api_client, core, namespace, operator
):
    create_job(api_client, namespace)

    pods = wait_for(lambda: running_pods(core, namespace, 2), what="two running trainer pods")
    assert [p.metadata.name for p in pods] == ["grpo-a0-n0", "grpo-a0-n1"]
    job = wait_for(lambda: phase_is(api_client, namespace, Phase.RUNNING), what="phase Running")
    for pod in pods:
        assert pod.metadata.owner_references[0].uid == job["metadata"]["uid"]
        assert pod.metadata.labels[c.LABEL_ATTEMPT] == "0"
        assert pod.spec.containers[0].command[0] == "torchrun"
        assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "1"
    env = {e.name: e.value for e in pods[1].spec.containers[0].env}
    assert env["PET_NODE_RANK"] == "1" and env["PET_NNODES"] == "2"
    assert env["MASTER_ADDR"] == f"grpo-n0.grpo.{namespace}.svc"
    service = core.read_namespaced_service("grpo", namespace)
    assert service.spec.cluster_ip == "None"

    for pod in pods:
        finish(core, namespace, pod.metadata.name, 0)

    job = wait_for(lambda: phase_is(api_client, namespace, Phase.SUCCEEDED), what="phase Succeeded")
    assert job["status"]["completionTime"]
    # Events go out right after the status they describe.
    wait_for(
        lambda: {"GangCreated", "Running", "Succeeded"} <= event_reasons(core, namespace),
        what="the events",
    )


def test_failing_trainer_fails_the_job_when_the_budget_is_spent(
    api_client, core, namespace, operator
):
    create_job(api_client, namespace)
    pods = wait_for(lambda: running_pods(core, namespace, 2), what="two running trainer pods")

    finish(core, namespace, pods[0].metadata.name, 3)

    job = wait_for(lambda: phase_is(api_client, namespace, Phase.FAILED), what="phase Failed")
    failed = next(x for x in job["status"]["conditions"] if x["type"] == "Failed")
    assert failed["reason"] == "FailureBudgetExhausted"
    assert "code 3" in failed["message"]
    assert job["status"]["failures"] == 1
    wait_for(lambda: not any(p.status.phase == "Running" for p in trainer_pods(core, namespace)),
             what="the surviving pod to be stopped")  # fmt: skip
    wait_for(
        lambda: "TrainerFailed" in event_reasons(core, namespace), what="the TrainerFailed event"
    )


def test_suspend_removes_the_pods_and_resume_starts_a_new_attempt(
    api_client, core, namespace, operator
):
    create_job(api_client, namespace)
    wait_for(lambda: running_pods(core, namespace, 2), what="two running trainer pods")

    patch_spec(api_client, namespace, {"suspend": True})

    wait_for(lambda: phase_is(api_client, namespace, Phase.SUSPENDED), what="phase Suspended")
    wait_for(lambda: trainer_pods(core, namespace) == [], what="no pods while suspended")

    patch_spec(api_client, namespace, {"suspend": False})

    pods = wait_for(lambda: running_pods(core, namespace, 2), what="the new gang")
    assert [p.metadata.name for p in pods] == ["grpo-a1-n0", "grpo-a1-n1"]
    job = wait_for(lambda: phase_is(api_client, namespace, Phase.RUNNING), what="phase Running")
    assert (job["status"]["preemptions"], job["status"]["failures"]) == (0, 0)


def test_deleting_the_job_removes_its_pods_and_service(api_client, core, namespace, operator):
    create_job(api_client, namespace)
    wait_for(lambda: running_pods(core, namespace, 2), what="two running trainer pods")

    jobs(api_client).delete_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, "grpo"
    )

    wait_for(
        lambda: trainer_pods(core, namespace) == [],
        timeout=60,
        what="the garbage collector to remove the pods",
    )
    wait_for(
        lambda: core.list_namespaced_service(namespace).items == [],
        timeout=60,
        what="the service to go",
    )


def test_operator_restarted_mid_run_neither_duplicates_nor_orphans_pods(
    api_client, core, namespace, operator
):
    create_job(api_client, namespace)
    wait_for(lambda: running_pods(core, namespace, 2), what="two running trainer pods")
    before = {p.metadata.name: p.metadata.uid for p in trainer_pods(core, namespace)}

    operator.kill()
    operator.start()

    job = wait_for(lambda: phase_is(api_client, namespace, Phase.RUNNING), what="phase Running")
    after = {p.metadata.name: p.metadata.uid for p in trainer_pods(core, namespace)}
    assert after == before
    assert job["status"]["attempt"] == 0
    for pod in trainer_pods(core, namespace):
        finish(core, namespace, pod.metadata.name, 0)
    wait_for(lambda: phase_is(api_client, namespace, Phase.SUCCEEDED), what="phase Succeeded")


@pytest.mark.parametrize(
    ("template_spec", "namespace_labels", "words"),
    [
        ({"priorityClassName": "does-not-exist"}, {}, "no PriorityClass with name does-not-exist"),
        ({"serviceAccountName": "nobody"}, {}, 'serviceaccount "nobody" not found'),
        ({"containers": [{"name": "trainer", "securityContext": {"privileged": True}}]},
         {"pod-security.kubernetes.io/enforce": "baseline"}, 'violates PodSecurity "baseline'),
    ],
    ids=["priority-class", "service-account", "pod-security"],
)  # fmt: skip
def test_pods_refused_by_admission_fail_the_job_with_the_servers_message(
    api_client, core, namespace, operator, template_spec, namespace_labels, words
):
    """A 403 from admission is no missing permission of rljob's: retrying cannot help."""
    if namespace_labels:
        core.patch_namespace(namespace, {"metadata": {"labels": namespace_labels}})
    body = copy.deepcopy(JOB)
    body["spec"]["template"] = {"spec": template_spec}
    create_job(api_client, namespace, body)

    job = wait_for(lambda: phase_is(api_client, namespace, Phase.FAILED), 30, "the job to fail")

    failed = {x["type"]: x for x in job["status"]["conditions"]}["Failed"]
    assert failed["reason"] == "PodRejected" and words in failed["message"]
    # Events leave the pass on their own thread: the job's status can come first.
    wait_for(lambda: "PodRejected" in event_reasons(core, namespace), what="the PodRejected Event")
    assert trainer_pods(core, namespace) == []


@pytest.mark.parametrize(
    ("template_spec", "field"),
    [
        ({"containers": [{"name": "trainer", "command": ["python", "train.py"]}]},
         "spec.template.spec.containers[trainer].command"),
        ({"containers": [{"name": "trainer", "env": [{"name": "MASTER_PORT", "value": "1"}]}]},
         "spec.template.spec.containers[trainer].env[MASTER_PORT]"),
        ({"volumes": [{"name": "checkpoints", "hostPath": {"path": "/"}}]},
         "spec.template.spec.volumes[checkpoints]"),
    ],
    ids=["command", "env", "volume"],
)  # fmt: skip
def test_a_template_that_sets_a_part_of_rljobs_fails_the_job_naming_the_field(
    api_client, core, namespace, operator, template_spec, field
):
    """What the API server's schema cannot tell (it is rljob's, not a pod's, rule), the
    operator says before it creates anything."""
    body = copy.deepcopy(JOB)
    body["spec"]["template"] = {"spec": template_spec}
    create_job(api_client, namespace, body)

    job = wait_for(lambda: phase_is(api_client, namespace, Phase.FAILED), 30, "the job to fail")

    failed = {x["type"]: x for x in job["status"]["conditions"]}["Failed"]
    assert failed["reason"] == "InvalidSpec" and failed["message"].startswith(field)
    # Events leave the pass on their own thread: the job's status can come first.
    wait_for(lambda: "InvalidSpec" in event_reasons(core, namespace), what="the InvalidSpec Event")
    assert trainer_pods(core, namespace) == []


def ray_job_body(name="grpo"):
    body = copy.deepcopy(JOB)
    body["metadata"]["name"] = name
    del body["spec"]["nprocPerNode"]  # Ray places one worker per GPU
    body["spec"]["framework"] = "verl"
    body["spec"]["command"] = ["python3", "-m", "verl.trainer.main_ppo", "trainer.save_freq=2"]
    return body


def selects(selector, labels):
    return selector["matchLabels"].items() <= (labels or {}).items()


@pytest.mark.parametrize("labelled", [True, False], ids=["with-the-jobs-label", "unlabelled"])
def test_a_configmap_planted_under_the_launchers_name_makes_the_ray_job_refuse_to_start(
    api_client, core, namespace, operator, labelled
):
    """Whoever creates the launcher's ConfigMap first would put the code that every Ray
    process of the job imports: the job fails, naming it, and no pod mounts it. With the job's
    labels the planted one is in the operator's cache; without, its create finds it."""
    from rljob_operator.launcher import podside, ray

    name = podside.config_map_name("grpo", (*ray.POD_PROGRAMS, "rljob_verl_hooks.py"))
    labels = {c.LABEL_MANAGED_BY: c.MANAGED_BY, c.LABEL_JOB: "grpo"} if labelled else {}
    planted = {"metadata": {"name": name, "labels": labels},
               "data": {"rljob_ray_bridge.py": "import os  # someone else's code"}}  # fmt: skip
    core.create_namespaced_config_map(namespace, planted)
    create_job(api_client, namespace, ray_job_body())

    job = wait_for(lambda: phase_is(api_client, namespace, Phase.FAILED), 30, "the job to fail")

    failed = {x["type"]: x for x in job["status"]["conditions"]}["Failed"]
    assert failed["reason"] == "ForeignChild"
    assert failed["message"].startswith(f"ConfigMap {name} exists and is not the job's own")
    wait_for(lambda: "ForeignChild" in event_reasons(core, namespace), what="the Event")
    assert trainer_pods(core, namespace) == []
    kept = core.read_namespaced_config_map(name, namespace)
    assert kept.data == planted["data"]  # not rljob's to delete


def torchrun_job_body(name="grpo"):
    body = copy.deepcopy(JOB)  # rljob's own trainer, under torchrun
    body["metadata"]["name"] = name
    return body


def owned_by_the_job(job):
    """What anyone who can read the job can write into an object of theirs."""
    meta = job["metadata"]
    return [{"apiVersion": c.API_VERSION, "kind": c.KIND, "name": meta["name"],
             "uid": meta["uid"], "controller": True}]  # fmt: skip


def suspended_ray_job(api_client, namespace):
    body = ray_job_body()
    body["spec"]["suspend"] = True
    return create_job(api_client, namespace, body)


@pytest.mark.parametrize(
    ("content", "why"),
    [("other-code", "its contents are not what rljob ships"),
     ("rljobs-files-mutable", "it is not immutable")],
)  # fmt: skip
def test_a_configmap_planted_with_the_jobs_owner_while_it_is_suspended_is_never_mounted(
    api_client, core, namespace, operator, content, why
):
    """The job's uid is no secret: a ConfigMap planted under the launcher's name, with the
    job's labels and the job as its controller, is in the operator's cache as the job's own.
    The gang after the resume reads and checks it all the same: the job fails, naming it, and
    no pod mounts it. rljob's own files in a mutable ConfigMap are refused too: whoever made it
    would change them once the pods run."""
    from rljob_operator.launcher import podside, ray

    operator.stop()  # so that the operator lists the planted ConfigMap before any pass
    job = suspended_ray_job(api_client, namespace)
    name = podside.config_map_name("grpo", (*ray.POD_PROGRAMS, "rljob_verl_hooks.py"))
    data = podside.config_map("grpo", namespace, {}, (*ray.POD_PROGRAMS, "rljob_verl_hooks.py"))[
        "data"
    ]
    if content == "other-code":
        data = {**data, "rljob_ray_bridge.py": "import os  # someone else's code"}
    labels = {c.LABEL_MANAGED_BY: c.MANAGED_BY, c.LABEL_JOB: "grpo"}
    core.create_namespaced_config_map(namespace, {"metadata": {
        "name": name, "labels": labels, "ownerReferences": owned_by_the_job(job)}, "data": data})  # fmt: skip
    operator.start()
    wait_for(lambda: phase_is(api_client, namespace, Phase.SUSPENDED), what="the job Suspended")

    patch_spec(api_client, namespace, {"suspend": False})

    job = wait_for(lambda: phase_is(api_client, namespace, Phase.FAILED), what="the job to fail")
    failed = {x["type"]: x for x in job["status"]["conditions"]}["Failed"]
    assert failed["reason"] == "ForeignChild"
    assert failed["message"].startswith(f"ConfigMap {name} exists and is not the job's own ({why}")
    wait_for(lambda: "ForeignChild" in event_reasons(core, namespace), what="the Event")
    assert trainer_pods(core, namespace) == []
    assert core.read_namespaced_config_map(name, namespace).data == data  # not rljob's to delete


def test_the_launcher_configmap_is_immutable_so_no_edit_reaches_the_pods(
    api_client, core, namespace, operator
):
    from rljob_operator.launcher import podside, ray

    create_job(api_client, namespace, ray_job_body())
    wait_for(lambda: len(trainer_pods(core, namespace)) == 2, what="the gang")
    name = podside.config_map_name("grpo", (*ray.POD_PROGRAMS, "rljob_verl_hooks.py"))
    assert core.read_namespaced_config_map(name, namespace).immutable is True

    with pytest.raises(ApiException) as refused:
        core.patch_namespaced_config_map(name, namespace,
                                         {"data": {"rljob_ray_bridge.py": "import os"}})  # fmt: skip

    assert refused.value.status == 422
    shipped = podside.config_map("grpo", namespace, {}, (*ray.POD_PROGRAMS, "rljob_verl_hooks.py"))[
        "data"
    ]
    assert core.read_namespaced_config_map(name, namespace).data == shipped


def test_a_ray_token_secret_planted_while_the_job_is_suspended_is_never_mounted(
    api_client, core, namespace, operator
):
    """Whoever may create Secrets and read the job could make its token's Secret first, under
    a name made of the job's uid, with the job as owner, and know the token. rljob names it at
    random, records the name once the Secret is made, and the gang mounts only that."""
    from rljob_operator.launcher import ray

    job = suspended_ray_job(api_client, namespace)
    uid = job["metadata"]["uid"]
    planted = f"grpo-ray-token-{uid[:8]}"  # the name an rljob before #52 gave it
    labels = {c.LABEL_MANAGED_BY: c.MANAGED_BY, c.LABEL_JOB: "grpo"}
    core.create_namespaced_secret(namespace, {
        "metadata": {"name": planted, "labels": labels, "ownerReferences": owned_by_the_job(job)},
        "stringData": {ray.TOKEN_KEY: "known-to-someone-else"}})  # fmt: skip
    wait_for(lambda: phase_is(api_client, namespace, Phase.SUSPENDED), what="the job Suspended")

    patch_spec(api_client, namespace, {"suspend": False})

    pods = wait_for(lambda: (lambda ps: ps if len(ps) == 2 else None)(trainer_pods(core, namespace)),
                    what="the gang")  # fmt: skip
    recorded = get_job(api_client, namespace)["status"]["rayTokenSecret"]
    assert re.fullmatch("grpo-ray-token-[0-9a-f]{32}", recorded) and recorded != planted
    for pod in pods:
        (volume,) = [v for v in pod.spec.volumes if v.name == ray.TOKEN_VOLUME]
        assert volume.secret.secret_name == recorded
    secret = core.read_namespaced_secret(recorded, namespace)
    token = base64.b64decode(secret.data[ray.TOKEN_KEY]).decode()
    assert len(token) >= 40 and token != "known-to-someone-else"
    assert secret.immutable is True and secret.metadata.owner_references[0].uid == uid


@pytest.mark.parametrize("launcher", ["ray", "torchrun"])
def test_a_gangs_networkpolicy_admits_its_own_pods_and_no_other(
    api_client, core, namespace, operator, launcher
):
    """This control plane runs no network plugin that enforces NetworkPolicy (docs/testenv.md):
    the test asserts what the API server stores, and what its selectors take in: every pod of
    the gang, and as peers only those, not the pods of another job beside it. Ray's dashboard
    and GCS run what they are sent; torchrun's c10d store, gloo and NCCL authenticate nobody."""
    body = ray_job_body if launcher == "ray" else torchrun_job_body
    create_job(api_client, namespace, body("grpo"))
    create_job(api_client, namespace, body("other"))
    networking = client.NetworkingV1Api(api_client)

    def policies():
        found = networking.list_namespaced_network_policy(namespace).items
        return found if len(found) == 2 else None

    stored = {p.metadata.name: api_client.sanitize_for_serialization(p)
              for p in wait_for(policies, 30, "a NetworkPolicy per job")}  # fmt: skip
    pods = wait_for(lambda: (lambda ps: ps if len(ps) == 4 else None)(trainer_pods(core, namespace)),
                    30, "both gangs")  # fmt: skip
    policy = stored[f"grpo-{launcher}-gang"]
    assert policy["metadata"]["ownerReferences"][0]["name"] == "grpo"
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    assert "ports" not in rule  # every port of the gang, to the gang
    (peer,) = rule["from"]
    ours = [p for p in pods if selects(policy["spec"]["podSelector"], p.metadata.labels)]
    admitted = [p for p in pods if selects(peer["podSelector"], p.metadata.labels)]
    assert [p.metadata.name for p in ours] == [p.metadata.name for p in admitted]
    assert {p.metadata.labels[c.LABEL_JOB] for p in ours} == {"grpo"} and len(ours) == 2
    assert "namespaceSelector" not in peer  # the job's namespace only


def test_a_spec_over_256_kib_runs_and_the_operator_keeps_no_state_on_the_job(
    api_client, core, namespace, operator
):
    """Annotations may hold 256 KiB in all: the operator stores nothing on the job, so a
    large spec (here 300 KB of env) is no trouble for it (issue #17)."""
    body = copy.deepcopy(JOB)
    body["spec"]["env"] = [{"name": f"BIG_{i}", "value": "x" * 3000} for i in range(100)]
    create_job(api_client, namespace, body)

    wait_for(lambda: running_pods(core, namespace, 2), 30, "the gang to run")
    finish(core, namespace, "grpo-a0-n0", 0)
    finish(core, namespace, "grpo-a0-n1", 0)
    job = wait_for(
        lambda: phase_is(api_client, namespace, Phase.SUCCEEDED), 30, "the job to succeed"
    )

    assert not [
        k for k in job["metadata"].get("annotations") or {} if "kopf" in k or "rljob.io" in k
    ]
    # The API server's 422 as the operator's requests (": 422 ...") or kopf's would log it;
    # a bare "422" is also any log line's milliseconds.
    refused = re.compile(r": 422 |Unprocessable Entity|Too long: ")
    assert "Traceback" not in operator.log() and not refused.search(operator.log())
