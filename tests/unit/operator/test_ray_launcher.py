"""The Ray form of a gang: what each rank runs, its env, ports and volumes, and the node program."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import rljob_contract as contract
from builders import job_ref, make_job, mounted_launcher
from rljob_operator.api.spec import SpecError, parse_spec
from rljob_operator.launcher import podside, ray
from rljob_operator.launcher.pods import (
    ResumeTarget,
    desired_launcher_config_map,
    desired_network_policy,
    desired_pods,
    desired_secret,
    desired_service,
)
from rljob_podside import ray_node

VERL = {"framework": "verl", "command": ["python3", "-m", "verl.trainer.main_ppo"]}
OPENRLHF = {"framework": "openrlhf", "command": ["python3", "-m", "openrlhf.cli.train_ppo_ray"]}
RESUME = ResumeTarget("/checkpoints/run/global_step_20", 20)


def render(resume=None, **spec):
    job = make_job(**{**VERL, **spec})
    return desired_pods(parse_spec(job["spec"]), job_ref(job), 2, resume)


def container(pod):
    return pod["spec"]["containers"][0]


def env_of(pod):
    return {e["name"]: e.get("value") for e in container(pod)["env"]}


def split(command):
    """(interpreter, role, flags, driver) of a rendered Ray container command."""
    interpreter, program, role, *rest = command
    assert program == ray.NODE_PROGRAM == f"{ray.LAUNCHER_DIR}/ray_node.py"
    _, flags, driver = ray_node.parse_argv([role, *rest])
    return interpreter, role, flags, driver


@pytest.mark.parametrize(
    ("spec", "launcher"),
    [
        ({"framework": "rljob"}, "torchrun"),
        ({"framework": "rlinf", "command": ["python", "main_grpo.py"]}, "ray"),
        (VERL, "ray"),
        (OPENRLHF, "ray"),
        ({"framework": "trl", "command": ["python", "grpo.py"]}, "torchrun"),
        ({"framework": "custom", "command": ["python", "t.py"]}, "torchrun"),
        ({"framework": "custom", "command": ["python", "t.py"], "launcher": "ray"}, "ray"),
        ({**VERL, "launcher": "torchrun"}, "torchrun"),
    ],
)
def test_launcher_defaults_to_ray_for_rlinf_and_verl_and_custom_chooses(spec, launcher):
    assert parse_spec(make_job(**spec)["spec"]).launcher == launcher


def test_head_starts_ray_then_runs_the_driver_with_args_and_resume_switch():
    head, worker = render(
        RESUME, args=["trainer.save_freq=5"], resources={"limits": {"nvidia.com/gpu": 8}}
    )

    interpreter, role, flags, driver = split(container(head)["command"])
    assert (interpreter, role) == ("python3", "head")
    assert driver == ["python3", "-m", "verl.trainer.main_ppo"]
    assert "--num-gpus=8" in flags and f"--temp-dir={ray.TEMP_DIR}" in flags
    assert "--dashboard-port=8265" in flags
    assert not any(f.startswith("--ray-client-server-port") for f in flags)  # needs ray[client]
    assert container(head)["args"] == [
        "trainer.save_freq=5",
        "trainer.resume_mode=resume_path",
        "trainer.resume_from_path=/checkpoints/run/global_step_20",
        "trainer.default_local_dir=/checkpoints/run",
    ]
    _, role, flags, driver = split(container(worker)["command"])
    assert (role, driver) == ("worker", [])
    assert "--num-gpus=8" in flags and not any(f.startswith("--dashboard") for f in flags)
    assert container(worker)["args"] == []  # neither the driver's args nor the resume switch


def test_openrlhf_is_a_ray_gang_whose_driver_alone_gets_its_resume_switch():
    """OpenRLHF's own switch loads DeepSpeed's `latest`; the bridge in every actor and critic
    makes it the folder rljob chose, which every pod is told (RLJOB_RESUME_DIR)."""
    chosen = ResumeTarget("/checkpoints/ppo/_actor/global_step20", 20)
    args = ["--ckpt.path=/checkpoints/ppo", "--ckpt.save_steps", "10"]
    head, worker = render(chosen, **OPENRLHF, args=args)
    _, role, _, driver = split(container(head)["command"])
    assert (role, driver) == ("head", ["python3", "-m", "openrlhf.cli.train_ppo_ray"])
    assert container(head)["args"] == [*args, "--ckpt.load_enable"]
    _, role, _, driver = split(container(worker)["command"])
    assert (role, driver, container(worker)["args"]) == ("worker", [], [])
    for pod in (head, worker):
        assert env_of(pod)[contract.ENV_RESUME_DIR] == chosen.path
    with pytest.raises(ValueError, match="_actor"):  # not a folder of --ckpt.path's _actor
        render(ResumeTarget("/checkpoints/ppo/global_step20", 20), **OPENRLHF)


def test_no_ray_pod_runs_torchrun():
    for pod in render(RESUME, nnodes=3):
        assert "torchrun" not in " ".join(container(pod)["command"])


def test_every_rank_exports_its_node_rank_and_the_head_address():
    pods = render(nnodes=3, ray={"port": 6400, "joinTimeoutSeconds": 90})
    for rank, pod in enumerate(pods):
        env = env_of(pod)
        assert env["NODE_RANK"] == str(rank) and "RLINF_NODE_RANK" not in env  # verl's job
        assert env[contract.ENV_RAY_HEAD_ADDRESS] == "grpo-n0.grpo.ns.svc:6400"
        assert env[contract.ENV_RAY_NNODES] == "3" and env[contract.ENV_RAY_JOIN_TIMEOUT] == "90"
        assert "PET_NNODES" not in env and "MASTER_ADDR" not in env
    assert env_of(pods[0])["RAY_ADDRESS"] == "grpo-n0.grpo.ns.svc:6400"
    assert "RAY_ADDRESS" not in env_of(pods[1])


def test_ray_pods_get_a_temp_dir_and_memory_backed_shm_and_the_head_a_readiness_probe():
    head, worker = render()
    for pod in (head, worker):
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in container(pod)["volumeMounts"]}
        assert volumes[ray.SHM_VOLUME]["emptyDir"] == {"medium": "Memory"}
        assert mounts["/dev/shm"] == ray.SHM_VOLUME and mounts[ray.TEMP_DIR] == ray.TEMP_VOLUME
    assert "readinessProbe" not in container(worker)


@pytest.mark.parametrize(
    ("spec", "marker"),
    [(VERL, "/tmp/rljob-trained-uid-1-grpo-a2-n0"), (OPENRLHF, ray.DRIVER_MARKER)],
    ids=["verl: a step of the attempt", "openrlhf: the driver runs"],
)
def test_the_head_is_ready_once_it_trains_where_rljob_sees_the_steps(spec, marker):
    """verl's steps reach rljob through its bridge's progress record: the head's node program
    marks the pod once the attempt has finished one. OpenRLHF's do not: its head is Ready
    once the driver runs, as before."""
    head, worker = render(**spec)
    probe = container(head)["readinessProbe"]
    assert probe["exec"]["command"] == ["test", "-e", marker] and probe["periodSeconds"] >= 1
    told = env_of(head).get(contract.ENV_TRAINED_MARKER)
    assert told == (None if marker == ray.DRIVER_MARKER else marker)
    assert contract.ENV_TRAINED_MARKER not in env_of(worker)


def test_ray_pods_mount_the_launcher_config_map_that_the_job_owns():
    job = make_job(**VERL)
    spec, ref = parse_spec(job["spec"]), job_ref(job)
    config_map = desired_launcher_config_map(spec, ref)
    assert config_map["metadata"]["name"] == podside.config_map_name(
        ref.name, ray.pod_programs(spec)
    )
    assert config_map["metadata"]["name"].startswith(f"{ref.name}-launcher-")
    assert config_map["metadata"]["ownerReferences"][0]["uid"] == ref.uid
    for pod in desired_pods(spec, ref, 0, None):
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        source = volumes[podside.LAUNCHER_VOLUME]["configMap"]
        assert source["name"] == config_map["metadata"]["name"]
        mounts = container(pod)["volumeMounts"]
        mount = next(m for m in mounts if m["name"] == podside.LAUNCHER_VOLUME)
        assert (mount["mountPath"], mount["readOnly"]) == (podside.LAUNCHER_DIR, True)
        files = {i["path"]: config_map["data"][i["key"]] for i in source["items"]}
        assert files == podside.launcher_files(ray.pod_programs(spec))
    assert {"ray_node.py", "rljob_ray_bridge.py", "rljob_verl_hooks.py", "rljob_guest.py",
            "rljob_contract/__init__.py", "rljob_contract/progress.py"} == {
        path for path in podside.launcher_files(ray.pod_programs(spec))
        if not path.startswith("rljob_contract/") or path.endswith(("__init__.py", "progress.py"))
    }  # fmt: skip
    assert desired_launcher_config_map(parse_spec(make_job()["spec"]), ref) is None  # torchrun


def test_a_ray_gangs_ports_admit_only_the_jobs_own_pods():
    """Ray's dashboard and GCS run whatever job they are sent: the NetworkPolicy selects every
    pod of the job and admits ingress from those pods alone (torchrun's: test_launcher)."""
    job = make_job(**VERL)
    ref = job_ref(job)
    policy = desired_network_policy(parse_spec(job["spec"]), ref)
    own = {"matchLabels": {"rljob.io/job-name": ref.name,
                           "app.kubernetes.io/managed-by": "rljob-operator"}}  # fmt: skip
    assert policy["spec"] == {
        "podSelector": own, "policyTypes": ["Ingress"], "ingress": [{"from": [{"podSelector": own}]}]
    }  # fmt: skip
    assert policy["metadata"]["ownerReferences"][0]["uid"] == ref.uid
    assert policy["metadata"]["name"] == f"{ref.name}-ray-gang"
    for pod in render():  # the selector takes in every pod of the gang
        labels = pod["metadata"]["labels"]
        assert own["matchLabels"].items() <= labels.items()


@pytest.mark.parametrize("token_auth", [True, False])
def test_every_ray_pod_reads_the_jobs_own_token_for_rays_authentication(token_auth):
    from rljob_operator.reconcile.act import with_fresh_secrets

    job = make_job(**VERL, ray={"tokenAuth": token_auth})
    ref = job_ref(job)
    spec = parse_spec(job["spec"])
    name = ray.token_secret_name(ref, "0123456789abcdef0123456789abcdef")
    secret = desired_secret(spec, ref, name)
    for pod in desired_pods(spec, ref, 2, None, secret=name):
        env = {e["name"]: e.get("value") for e in container(pod)["env"]}
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        if not token_auth:
            assert "RAY_AUTH_MODE" not in env and ray.TOKEN_VOLUME not in volumes
            continue
        assert env["RAY_AUTH_MODE"] == "token"
        assert env["RAY_AUTH_TOKEN_PATH"] == f"{ray.TOKEN_DIR}/{ray.TOKEN_KEY}"
        assert volumes[ray.TOKEN_VOLUME]["secret"]["secretName"] == secret["metadata"]["name"]
        mount = next(m for m in container(pod)["volumeMounts"] if m["name"] == ray.TOKEN_VOLUME)
        assert (mount["mountPath"], mount["readOnly"]) == (ray.TOKEN_DIR, True)
    if not token_auth:
        assert secret is None
        return
    assert secret["metadata"]["name"] == f"{ref.name}-ray-token-0123456789abcdef0123456789abcdef"
    assert secret["metadata"]["ownerReferences"][0]["uid"] == ref.uid
    assert secret["immutable"] is True  # nobody changes the token under a running gang
    made = [with_fresh_secrets(secret)["stringData"][ray.TOKEN_KEY] for _ in range(2)]
    assert all(len(token) >= 40 for token in made) and made[0] != made[1]  # fresh, random
    assert secret["stringData"] == {ray.TOKEN_KEY: ""}  # the plan holds no token
    # A render with no recorded Secret names none, which the API server refuses, rather than
    # a Secret whose name anyone could work out and make first.
    for pod in desired_pods(spec, ref, 2, None):
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert volumes[ray.TOKEN_VOLUME]["secret"]["secretName"] == ""


def test_no_ray_pod_carries_the_launcher_source_in_its_command():
    for pod in render(RESUME):
        assert all(len(part) < 200 for part in container(pod)["command"])


def test_ray_ports_are_named_on_the_head_and_the_headless_service():
    job = make_job(**VERL, rendezvousPort=29600, ray={"port": 6380, "clientPort": 10001})
    spec = parse_spec(job["spec"])
    ports = {p["name"]: p["port"] for p in desired_service(spec, job_ref(job))["spec"]["ports"]}
    assert ports == {
        "rendezvous": 29600,
        "ray-gcs": 6380,
        "ray-dashboard": 8265,
        "ray-client": 10001,
    }
    head, worker = desired_pods(spec, job_ref(job), 0, None)
    assert {p["name"] for p in container(head)["ports"]} >= {
        "ray-gcs",
        "ray-dashboard",
        "ray-client",
    }
    assert [p["name"] for p in container(worker)["ports"]] == ["rendezvous"]


def test_torchrun_service_names_only_the_rendezvous_port():
    job = make_job(framework="rljob")
    ports = desired_service(parse_spec(job["spec"]), job_ref(job))["spec"]["ports"]
    assert [p["name"] for p in ports] == ["rendezvous"]


def test_custom_job_may_choose_ray_and_start_args_go_to_every_node_or_the_head():
    pods = render(framework="custom", command=["/opt/venv/bin/python", "driver.py"], launcher="ray",
                  ray={"startArgs": ["--object-store-memory=1000000000"],
                       "headStartArgs": ["--include-dashboard=false"]})  # fmt: skip
    flags = {}
    for rank, pod in enumerate(pods):
        interpreter, _, flags[rank], _ = split(container(pod)["command"])
        assert interpreter == "/opt/venv/bin/python"  # the driver's own Python
    assert flags[0][-2:] == ["--object-store-memory=1000000000", "--include-dashboard=false"]
    assert flags[1][-1] == "--object-store-memory=1000000000"
    assert "--include-dashboard=false" not in flags[1]  # Ray refuses it off the head


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({**VERL, "nprocPerNode": 8}, "spec.nprocPerNode"),
        ({**VERL, "rendezvousPort": 6379}, "spec.ray"),
        ({**VERL, "ray": {"port": 8265}}, "spec.ray"),
        ({"framework": "custom", "launcher": "ray"}, "spec.command"),
        ({**VERL, "launcher": "mpirun"}, "spec.launcher"),
    ],
)
def test_bad_ray_specs_name_the_field(spec, field):
    with pytest.raises(SpecError) as caught:
        parse_spec(make_job(**spec)["spec"])
    assert caught.value.field == field


# ---------------------------------------------------------------- the node program
class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_worker_retries_until_the_head_answers():
    clock, calls = FakeClock(), []

    def connect(address):
        calls.append(address)
        if len(calls) < 4:
            raise ConnectionRefusedError("refused")
        return object()

    ray_node.wait_for_head("head.svc:6379", 30, connect, clock, clock.sleep)
    assert calls == [("head.svc", 6379)] * 4 and clock.now == 3 * ray_node.RETRY_SECONDS


def test_worker_past_its_deadline_names_the_address_it_could_not_reach():
    clock = FakeClock()

    def connect(address):
        raise OSError("Name or service not known")

    with pytest.raises(ray_node.LaunchError, match=r"head\.svc:6379 within 10 s: Name or service"):
        ray_node.wait_for_head("head.svc:6379", 10, connect, clock, clock.sleep)
    assert clock.now >= 10


def test_head_waits_for_every_node_and_fails_with_the_count_past_its_deadline():
    clock, counts = FakeClock(), iter([1, 1, 2, 3])
    assert ray_node.wait_for_nodes(lambda: next(counts), 3, 60, clock, clock.sleep) == 3
    with pytest.raises(
        ray_node.LaunchError, match="only 2 of 3 Ray nodes joined the head within 5 s"
    ):
        ray_node.wait_for_nodes(lambda: 2, 3, 5, clock, clock.sleep)


@pytest.mark.parametrize(
    ("argv", "parsed"),
    [
        (["head", "--num-gpus=1", "--", "python", "-m", "x", "--", "y"],
         ("head", ["--num-gpus=1"], ["python", "-m", "x", "--", "y"])),
        (["worker", "--num-gpus=1"], ("worker", ["--num-gpus=1"], [])),
    ],
)  # fmt: skip
def test_node_program_arguments(argv, parsed):
    assert ray_node.parse_argv(argv) == parsed


@pytest.mark.parametrize(
    "argv", [[], ["head", "--x"], ["head", "--"], ["worker", "--", "python"], ["boss"]]
)
def test_node_program_refuses_a_malformed_command_line(argv):
    with pytest.raises(ray_node.LaunchError, match="usage"):
        ray_node.parse_argv(argv)


def test_worker_program_as_the_pod_runs_it_reports_the_unreachable_head(tmp_path):
    """The program as the pod runs it, from the mounted files, against a port nobody
    listens on."""
    program = mounted_launcher(tmp_path / "launcher") / "ray_node.py"
    message = tmp_path / "termination-log"
    env = {
        **os.environ,
        contract.ENV_RAY_HEAD_ADDRESS: "127.0.0.1:9",  # discard: nothing listens here
        contract.ENV_RAY_JOIN_TIMEOUT: "1",
        contract.ENV_TERMINATION_LOG: str(message),
    }
    result = subprocess.run(
        [sys.executable, str(program), "worker"], env=env, capture_output=True, cwd=tmp_path,
        text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    assert "could not reach the Ray head at 127.0.0.1:9 within 1 s" in message.read_text()
    assert "could not reach the Ray head" in result.stderr


@pytest.mark.parametrize(
    ("spec", "value"),
    [
        ({}, "true"),
        ({"saveOnNotice": False}, "false"),
        ({"ray": {"saveOnNotice": False}}, "false"),  # the deprecated spelling
        ({"saveOnNotice": True, "ray": {"saveOnNotice": True}}, "true"),
    ],
)
def test_every_ray_pod_knows_its_notice_file_grace_and_whether_to_save_on_notice(spec, value):
    for pod in render(**spec, template={"spec": {"terminationGracePeriodSeconds": 45}}):
        env = env_of(pod)
        assert env[contract.ENV_SAVE_ON_NOTICE] == value
        assert env[contract.ENV_NOTICE_FILE] == ray.NOTICE_FILE
        assert (
            env[contract.ENV_GRACE_SECONDS]
            == "45"
            == str(pod["spec"]["terminationGracePeriodSeconds"])
        )


def test_save_on_notice_must_be_a_boolean():
    with pytest.raises(SpecError, match=r"spec.ray.saveOnNotice: must be true or false"):
        parse_spec(make_job(**VERL, ray={"saveOnNotice": "yes"})["spec"])
    with pytest.raises(SpecError, match=r"^spec.saveOnNotice: must be true or false"):
        parse_spec(make_job(**VERL, saveOnNotice="no")["spec"])


@pytest.mark.parametrize("given", [True, False])
def test_save_on_notice_and_its_deprecated_spelling_that_differ_are_refused_naming_both(given):
    spec = make_job(**VERL, saveOnNotice=given, ray={"saveOnNotice": not given})["spec"]
    with pytest.raises(SpecError, match=r"^spec.saveOnNotice: .*spec.ray.saveOnNotice") as refused:
        parse_spec(spec)
    assert refused.value.field == "spec.saveOnNotice"


def test_an_rlinf_pod_also_gets_the_node_rank_under_rlinfs_own_name():
    pods = render(nnodes=2, framework="rlinf", args=["runner.save_interval=5"])
    assert [env_of(pod)["RLINF_NODE_RANK"] for pod in pods] == ["0", "1"]


def test_a_node_restarted_in_its_pod_forgets_the_notice_and_driver_marker_of_the_run_before(
    tmp_path, monkeypatch
):
    notice_file, marker, other = tmp_path / "notice", tmp_path / "driver", tmp_path / "session"
    for path in (notice_file, marker, other):
        path.write_text("from the run before\n")
    monkeypatch.setenv(contract.ENV_NOTICE_FILE, str(notice_file))
    monkeypatch.setenv(contract.ENV_RAY_DRIVER_MARKER, str(marker))

    ray_node.forget_an_earlier_run(ray_node._notice_from_env())

    assert not notice_file.exists() and not marker.exists()
    assert other.exists()  # Ray's own files are Ray's


def test_a_file_of_an_earlier_run_that_cannot_be_removed_leaves_the_node_to_start(
    tmp_path, monkeypatch, capsys
):
    stuck = tmp_path / "notice"
    stuck.mkdir()  # a folder where the notice file would be: unlink fails
    monkeypatch.setenv(contract.ENV_NOTICE_FILE, str(stuck))
    monkeypatch.delenv(contract.ENV_RAY_DRIVER_MARKER, raising=False)

    ray_node.forget_an_earlier_run(ray_node._notice_from_env())

    assert stuck.is_dir() and f"cannot remove {stuck}" in capsys.readouterr().err
