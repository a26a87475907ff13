"""Rendering the gang: names, torchrun wrapping, rendezvous and resume injection."""

from __future__ import annotations

import pytest
from builders import job_ref, make_job
from rljob_operator.api.spec import parse_spec
from rljob_operator.launcher.pods import (
    ResumeTarget,
    desired_pods,
    desired_service,
    resume_arguments,
    torchrun_command,
)


def render(resume=None, rank=0, **spec):
    job = make_job(**spec)
    return desired_pods(parse_spec(job["spec"]), job_ref(job), 3, resume)[rank]


def env_of(pod):
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


@pytest.mark.parametrize(
    ("entry", "command"),
    [
        (("python", "-m", "rljob_trainer"), ["torchrun", "-m", "rljob_trainer"]),
        (("python3", "train.py", "--x"), ["torchrun", "train.py", "--x"]),
        (("bash", "-c", "run.sh"), ["torchrun", "--no-python", "bash", "-c", "run.sh"]),
    ],
)
def test_entry_point_is_wrapped_in_torchrun(entry, command):
    assert torchrun_command(entry) == command


@pytest.mark.parametrize(
    ("framework", "extra", "args"),
    [
        ("rljob", {}, ["runner.resume_dir=/ck/global_step_150"]),
        ("rlinf", {"command": ["python", "-m", "main"]}, ["runner.resume_dir=/ck/global_step_150"]),
        ("verl", {"command": ["python", "-m", "verl.trainer.main_ppo"]},
         ["trainer.resume_mode=resume_path", "trainer.resume_from_path=/ck/global_step_150", "trainer.default_local_dir=/ck"]),
        ("custom", {"command": ["python", "t.py"], "checkpoint": {"resumeArgsTemplate": "--from {path} --step {step}"}},
         ["--from", "/ck/global_step_150", "--step", "150"]),
        ("custom", {"command": ["python", "t.py"]}, []),
    ],
)  # fmt: skip
def test_each_framework_gets_its_own_resume_switch_without_trailing_slash(framework, extra, args):
    spec = parse_spec(make_job(framework=framework, **extra)["spec"])
    assert resume_arguments(spec, ResumeTarget("/ck/global_step_150/", 150)) == args


def test_pods_carry_rendezvous_and_checkpoint_settings():
    pod = render(
        rank=1,
        nnodes=4,
        nprocPerNode=8,
        checkpoint={"directory": "run/checkpoints", "saveInterval": 50},
    )

    env = env_of(pod)
    assert pod["metadata"]["name"] == "grpo-a3-n1"
    assert pod["spec"]["hostname"] == "grpo-n1" and pod["spec"]["subdomain"] == "grpo"
    assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "grpo-n0.grpo.ns.svc"
    assert (env["NODE_RANK"], env["PET_NNODES"], env["PET_NPROC_PER_NODE"]) == ("1", "4", "8")
    assert env["RLJOB_CHECKPOINT_DIR"] == "/checkpoints/run/checkpoints"
    assert env["RLJOB_SAVE_INTERVAL"] == "50"
    assert env["RLJOB_ATTEMPT"] == "3"
    assert "RLJOB_RESUME_DIR" not in env
    assert pod["spec"]["restartPolicy"] == "Never"


def test_user_env_cannot_override_the_operators_variables():
    pod = render(
        env=[{"name": "MASTER_ADDR", "value": "evil"}, {"name": "WANDB_MODE", "value": "offline"}]
    )

    names = [e["name"] for e in pod["spec"]["containers"][0]["env"]]
    assert names.count("MASTER_ADDR") == 1 and env_of(pod)["MASTER_ADDR"] != "evil"
    assert env_of(pod)["WANDB_MODE"] == "offline"


def test_template_overlay_reaches_the_pod_and_our_labels_win():
    pod = render(
        template={
            "metadata": {"labels": {"team": "rl", "rljob.io/attempt": "99"}},
            "spec": {
                "priorityClassName": "spot",
                "tolerations": [{"key": "gpu"}],
                "nodeSelector": {"pool": "h100"},
            },
        }
    )

    assert pod["metadata"]["labels"]["team"] == "rl"
    assert pod["metadata"]["labels"]["rljob.io/attempt"] == "3"
    assert pod["spec"]["priorityClassName"] == "spot"
    assert pod["spec"]["nodeSelector"] == {"pool": "h100"}


def test_checkpoint_volume_and_request_file_are_mounted():
    pod = render(
        checkpoint={
            "volume": {"persistentVolumeClaim": {"claimName": "ckpts"}},
            "mountPath": "/data",
        }
    )

    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["checkpoints"]["persistentVolumeClaim"] == {"claimName": "ckpts"}
    field = volumes["rljob-podinfo"]["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"]
    assert field == "metadata.annotations['rljob.io/checkpoint-request']"
    mounts = {m["name"]: m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert mounts["checkpoints"] == "/data"


def test_service_is_headless_and_publishes_not_ready_addresses():
    job = make_job()
    service = desired_service(parse_spec(job["spec"]), job_ref(job))

    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True


@pytest.mark.parametrize(("grace", "timeout"), [(None, "290"), (60, "50"), (30, "23"), (2, "2")])
def test_torchrun_waits_for_a_save_on_sigterm_for_nearly_the_whole_grace_period(grace, timeout):
    template = {"spec": {"terminationGracePeriodSeconds": grace}} if grace else {}
    pod = render(template=template) if template else render()

    assert env_of(pod)["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == timeout
    assert pod["spec"]["terminationGracePeriodSeconds"] == (grace or 300)
