"""Rendering the gang: names, torchrun wrapping, rendezvous and resume injection."""

from __future__ import annotations

from pathlib import Path

import pytest
import rljob_contract as contract
from builders import job_ref, make_job
from rljob_operator.api import spec as api_spec
from rljob_operator.api.spec import SpecError, parse_spec
from rljob_operator.launcher import podside
from rljob_operator.launcher.identity import JobRef
from rljob_operator.launcher.launchers import LAUNCHERS, Launcher
from rljob_operator.launcher.pods import (
    ResumeTarget,
    check_template,
    desired_launcher_config_map,
    desired_network_policy,
    desired_pods,
    desired_service,
    resume_arguments,
)
from rljob_operator.launcher.torchrun import torchrun_command


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


BRIDGE = "/etc/rljob/launcher/rljob_hf_bridge.py"


@pytest.mark.parametrize(
    ("entry", "command", "bridged"),
    [
        (["python", "grpo.py", "--save_steps=4"], ["torchrun", BRIDGE, "grpo.py", "--save_steps=4"], True),
        (["python3", "-m", "trl.scripts.grpo"], ["torchrun", BRIDGE, "-m", "trl.scripts.grpo"], True),
        # Not a Python program the bridge can run: TRL as it is, no files shipped.
        (["accelerate", "launch", "grpo.py"], ["torchrun", "--no-python", "accelerate", "launch", "grpo.py"], False),
        # A launcher that runs the Trainer in children of its own: the bridge would not see it.
        (["python", "-m", "trl.cli.main", "grpo"], ["torchrun", "-m", "trl.cli.main", "grpo"], False),
    ],
)  # fmt: skip
def test_trl_workers_start_in_rljobs_bridge_which_the_pods_mount(entry, command, bridged):
    job = make_job(framework="trl", command=entry)
    spec, ref = parse_spec(job["spec"]), job_ref(job)
    pods = desired_pods(spec, ref, 0, None)
    assert {tuple(p["spec"]["containers"][0]["command"][: len(command)]) for p in pods} == {
        tuple(command)
    }
    config_map = desired_launcher_config_map(spec, ref)
    if not bridged:
        assert config_map is None
        assert all("volumes" not in p["spec"] or not any(v["name"] == podside.LAUNCHER_VOLUME
                   for v in p["spec"]["volumes"]) for p in pods)  # fmt: skip
        return
    for pod in pods:
        (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == podside.LAUNCHER_VOLUME]
        assert volume["configMap"]["name"] == config_map["metadata"]["name"]
        paths = {item["path"] for item in volume["configMap"]["items"]}
        assert {"rljob_hf_bridge.py", "rljob_guest.py", "rljob_contract/__init__.py"} <= paths
        assert "ray_node.py" not in paths


@pytest.mark.parametrize(
    ("spec", "told"),
    [
        ({"framework": "trl", "command": ["python", "grpo.py"]}, "true"),
        ({"framework": "trl", "command": ["python", "grpo.py"], "saveOnNotice": False}, "false"),
        ({"framework": "trl", "command": ["python", "-m", "trl.cli.main"]}, None),  # no bridge
        ({"saveOnNotice": False}, None),  # rljob's trainer saves by itself, no bridge
    ],
)  # fmt: skip
def test_a_torchrun_bridge_is_told_whether_to_save_on_notice(spec, told):
    assert env_of(render(**spec)).get(contract.ENV_SAVE_ON_NOTICE) == told


@pytest.mark.parametrize(
    ("framework", "command", "probed"),
    [("rljob", None, True), ("trl", ["python", "grpo.py"], True),
     ("custom", ["python", "train.py"], False)],
)  # fmt: skip
def test_every_torchrun_pod_is_ready_once_it_trains_where_rljob_sees_the_steps(
    framework, command, probed
):
    """rljob's trainer and TRL's bridge mark their pod once the attempt has finished a step:
    the probe tests the marker, every second, in the container's own /tmp under a name of the
    job's and the pod's, and no volume is added (an emptyDir would stop `kubectl drain`). A
    custom trainer's steps are unseen: no probe, its pods Ready as they run."""
    job = make_job(framework=framework, **({"command": command} if command else {}))
    for pod in desired_pods(parse_spec(job["spec"]), job_ref(job), 0, None):
        trainer = pod["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in trainer["env"]}
        # no emptyDir of rljob's own (the checkpoint volume is one here: the job names none)
        assert [v["name"] for v in pod["spec"]["volumes"] if "emptyDir" in v] == ["checkpoints"]
        if not probed:
            assert "readinessProbe" not in trainer and contract.ENV_TRAINED_MARKER not in env
            continue
        marker = f"/tmp/rljob-trained-uid-1-{pod['metadata']['name']}"
        assert trainer["readinessProbe"]["exec"]["command"] == ["test", "-e", marker]
        assert env[contract.ENV_TRAINED_MARKER] == marker


def test_rljobs_own_trainer_ships_no_bridge():
    job = make_job()
    assert desired_launcher_config_map(parse_spec(job["spec"]), job_ref(job)) is None


@pytest.mark.parametrize(
    "spec",
    [{}, {"framework": "trl", "command": ["python", "grpo.py"]},
     {"framework": "custom", "command": ["bash", "-c", "train.sh"]}],
    ids=["rljob", "trl", "custom"],
)  # fmt: skip
def test_a_torchrun_gangs_ports_admit_only_the_jobs_own_pods(spec):
    """torchrun's c10d store (the rendezvous port) takes anyone's keys, and gloo and NCCL
    listen on ports of their own choosing without authentication (gloo's object collectives
    unpickle what they receive): the NetworkPolicy selects every pod of the job and admits
    ingress, on every port, from those pods alone. Egress is left alone."""
    job = make_job(**spec)
    ref = job_ref(job)
    policy = desired_network_policy(parse_spec(job["spec"]), ref)
    own = {"matchLabels": {"rljob.io/job-name": ref.name,
                           "app.kubernetes.io/managed-by": "rljob-operator"}}  # fmt: skip
    assert policy["kind"] == "NetworkPolicy"
    assert policy["metadata"]["name"] == f"{ref.name}-torchrun-gang"
    assert policy["metadata"]["ownerReferences"][0]["uid"] == ref.uid
    assert policy["spec"] == {
        "podSelector": own, "policyTypes": ["Ingress"], "ingress": [{"from": [{"podSelector": own}]}]
    }  # fmt: skip
    pods = desired_pods(parse_spec(job["spec"]), ref, 0, None)
    assert len(pods) == 2
    for pod in pods:  # the selector takes in every pod of the gang, as a target and a peer
        assert own["matchLabels"].items() <= pod["metadata"]["labels"].items()


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


def test_user_env_that_rljob_sets_is_refused_naming_it():
    with pytest.raises(
        SpecError, match=r"spec.env: MASTER_ADDR, RLJOB_BACKEND, RLJOB_RESUME_DIR: rljob sets"
    ):
        render(env=[{"name": "MASTER_ADDR", "value": "evil"}, {"name": "WANDB_MODE", "value": "x"},
                    {"name": "RLJOB_RESUME_DIR", "value": "/elsewhere"},
                    {"name": "RLJOB_BACKEND", "value": "megatron"}])  # fmt: skip


@pytest.mark.parametrize("backend", ["fsdp", "megatron"])
def test_the_rljob_trainer_is_told_its_backend(backend):
    assert env_of(render(backend=backend))["RLJOB_BACKEND"] == backend


def test_other_trainers_are_not_told_a_backend_they_read_from_their_own_config():
    pod = render(framework="custom", command=["python", "t.py"], backend="megatron")
    assert "RLJOB_BACKEND" not in env_of(pod)


def test_template_metadata_reaches_the_pod_and_rljob_keys_are_refused():
    pod = render(template={"metadata": {"labels": {"team": "rl"}, "annotations": {"a": "b"}},
                           "spec": {"priorityClassName": "spot", "nodeSelector": {"pool": "h100"}}})  # fmt: skip

    assert pod["metadata"]["labels"]["team"] == "rl" and pod["metadata"]["annotations"] == {
        "a": "b"
    }
    assert pod["metadata"]["labels"]["rljob.io/attempt"] == "3"
    assert (pod["spec"]["priorityClassName"], pod["spec"]["nodeSelector"]) == (
        "spot",
        {"pool": "h100"},
    )
    with pytest.raises(SpecError, match=r"spec.template.metadata.labels\[rljob.io/attempt\]"):
        render(template={"metadata": {"labels": {"rljob.io/attempt": "99"}}})


FULL_TEMPLATE = {
    "spec": {
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "runtimeClassName": "nvidia",
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                                       "whenUnsatisfiable": "DoNotSchedule"}],
        "initContainers": [
            {"name": "fetch-model", "image": "busybox", "command": ["true"]},
            {"name": "dashboard", "image": "ray", "restartPolicy": "Always"},
        ],
        "containers": [
            {"name": "log-shipper", "image": "fluent-bit"},
            {
                "name": "trainer",
                "env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}],
                "ports": [{"name": "metrics", "containerPort": 9000}],
                "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
                "resources": {"limits": {"nvidia.com/gpu": 8, "rdma/ib": 1}},
            },
        ],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
    }
}  # fmt: skip


def test_a_full_pod_template_reaches_the_pod_with_rljobs_parts_merged_into_the_trainer():
    pod = render(template=FULL_TEMPLATE)

    spec = pod["spec"]
    for field in ("hostNetwork", "dnsPolicy", "runtimeClassName", "topologySpreadConstraints",
                  "initContainers"):  # fmt: skip
        assert spec[field] == FULL_TEMPLATE["spec"][field]
    shipper, trainer = spec["containers"]
    assert shipper == {"name": "log-shipper", "image": "fluent-bit"}
    assert trainer["command"][0] == "torchrun" and trainer["image"] == "trainer:1"
    assert trainer["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    assert trainer["resources"] == {"limits": {"nvidia.com/gpu": 8, "rdma/ib": 1}}
    env = {e["name"]: e for e in trainer["env"]}
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "hf" and "MASTER_ADDR" in env
    assert {p["name"] for p in trainer["ports"]} == {"metrics", "rendezvous"}
    mounts = {m["mountPath"]: m["name"] for m in trainer["volumeMounts"]}
    assert mounts["/dev/shm"] == "dshm" and mounts["/checkpoints"] == "checkpoints"
    assert {v["name"] for v in spec["volumes"]} == {"dshm", "checkpoints", "rljob-podinfo"}
    assert (spec["restartPolicy"], spec["hostname"]) == ("Never", "grpo-n0")


def test_the_only_container_is_the_trainer_whatever_its_name():
    pod = render(template={"spec": {"containers": [{"name": "main", "workingDir": "/w"}]}})

    (container,) = pod["spec"]["containers"]
    assert container["name"] == "main" and container["workingDir"] == "/w"
    assert container["command"][0] == "torchrun"


def test_rljobs_own_value_written_again_is_no_conflict():
    pod = render(template={"spec": {"restartPolicy": "Never", "containers": [
        {"name": "trainer", "image": "trainer:1", "ports": [{"name": "rendezvous", "containerPort": 29500}]},
    ]}})  # fmt: skip

    assert pod["spec"]["containers"][0]["ports"] == [{"name": "rendezvous", "containerPort": 29500}]


def _trainer(**fields):
    return {"spec": {"containers": [{"name": "trainer", **fields}]}}


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"template": _trainer(command=["python", "train.py"])}, "containers[trainer].command"),
        ({"template": _trainer(args=["--lr", "1"])}, "containers[trainer].args"),
        ({"template": _trainer(image="other:2")}, "containers[trainer].image"),
        ({"template": _trainer(terminationMessagePath="/tmp/x")}, "containers[trainer].terminationMessagePath"),
        ({"template": _trainer(ports=[{"name": "rendezvous", "containerPort": 1234}])}, "containers[trainer].ports[rendezvous]"),
        ({"template": _trainer(ports=[{"name": "mine", "containerPort": 29500}])}, "containers[trainer].ports[29500]"),
        ({"template": _trainer(env=[{"name": "NODE_RANK", "value": "7"}])}, "containers[trainer].env[NODE_RANK]"),
        ({"env": [{"name": "A", "value": "1"}], "template": _trainer(env=[{"name": "A", "value": "2"}])}, "containers[trainer].env[A]"),
        ({"template": _trainer(volumeMounts=[{"name": "x", "mountPath": "/checkpoints"}])}, "containers[trainer].volumeMounts[/checkpoints]"),
        ({"resources": {"limits": {"cpu": 1}}, "template": _trainer(resources={"limits": {"cpu": 2}})}, "containers[trainer].resources"),
        ({"template": {"spec": {"volumes": [{"name": "checkpoints", "hostPath": {"path": "/x"}}]}}}, "spec.volumes[checkpoints]"),
        ({"template": {"spec": {"hostname": "mine"}}}, "spec.hostname"),
        ({"template": {"spec": {"restartPolicy": "OnFailure"}}}, "spec.restartPolicy"),
        ({"template": {"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}}, "spec.containers: with more than one container"),
        ({"launcher": "ray", "framework": "verl", "command": ["python", "-m", "verl"], "nprocPerNode": 1,
          "template": _trainer(readinessProbe={"exec": {"command": ["true"]}})}, "containers[trainer].readinessProbe"),
        ({"launcher": "ray", "framework": "verl", "command": ["python", "-m", "verl"], "nprocPerNode": 1,
          "template": _trainer(volumeMounts=[{"name": "dshm", "mountPath": "/dev/shm"}])}, "containers[trainer].volumeMounts[/dev/shm]"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)  # fmt: skip
def test_a_template_field_that_is_rljobs_is_refused_naming_it(extra, field):
    with pytest.raises(SpecError) as refused:
        check_template(parse_spec(make_job(**extra)["spec"]), JobRef("grpo", "ns", "uid"))

    assert str(refused.value).startswith("spec.template.") and field in str(refused.value)


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


@pytest.mark.parametrize("name", sorted(LAUNCHERS))
def test_each_launcher_gives_everything_the_renderer_asks_of_one(name):
    """A launcher is a module: nothing checks its functions until a pod is rendered with it."""
    launcher = LAUNCHERS[name]
    wanted = {n for n in vars(Launcher) if not n.startswith("_")} | set(Launcher.__annotations__)
    assert {n for n in wanted if not hasattr(launcher, n)} == set()
    assert launcher.DRIVER_ON_HEAD is (name == "ray")


CONTRACT = {f"rljob_contract/{p.name}" for p in Path(contract.__file__).parent.glob("*.py")}
RAY_NODE = {"ray_node.py", "rljob_ray_bridge.py", "rljob_guest.py"}
ALL_HOOKS = {"rljob_rlinf_hooks.py", "rljob_verl_hooks.py", "rljob_openrlhf_hooks.py"}


@pytest.mark.parametrize(
    ("spec", "shipped"),
    [
        ({}, None),  # rljob's trainer runs as it is
        ({"framework": "custom", "command": ["python", "train.py"]}, None),
        ({"framework": "trl", "command": ["python", "train.py"]},
         {"rljob_hf_bridge.py", "rljob_guest.py"}),
        ({"framework": "trl", "command": ["python", "-m", "trl.cli.main"]}, None),
        ({"framework": "trl", "command": ["python", "train.py"], "launcher": "ray"},
         RAY_NODE | ALL_HOOKS),
        ({"framework": "rlinf", "command": ["python", "main.py"]},
         RAY_NODE | {"rljob_rlinf_hooks.py"}),
        ({"framework": "verl", "command": ["python", "-m", "verl.trainer.main_ppo"]},
         RAY_NODE | {"rljob_verl_hooks.py"}),
        ({"framework": "openrlhf", "command": ["python", "-m", "x"]},
         RAY_NODE | {"rljob_openrlhf_hooks.py"}),
        # any program: every Ray framework's hooks, each of which applies in its framework only
        ({"framework": "custom", "command": ["python", "d.py"], "launcher": "ray"},
         RAY_NODE | ALL_HOOKS),
    ],
)  # fmt: skip
def test_each_job_ships_its_launchers_and_its_frameworks_pod_side_files(spec, shipped):
    parsed = parse_spec(make_job(nnodes=1, **spec)["spec"])
    config_map = desired_launcher_config_map(parsed, job_ref(make_job()))
    if shipped is None:
        assert config_map is None
    else:
        pod = desired_pods(parsed, job_ref(make_job()), 0, None)[0]
        volume = next(v for v in pod["spec"]["volumes"] if v["name"] == podside.LAUNCHER_VOLUME)
        assert volume["configMap"]["name"] == config_map["metadata"]["name"]
        assert {item["path"] for item in volume["configMap"]["items"]} == shipped | CONTRACT


def test_the_spec_accepts_exactly_the_registered_launchers():
    """api/ sits below launcher/ and cannot import the registry: its list is held to it here."""
    assert tuple(LAUNCHERS) == api_spec.LAUNCHERS


def test_a_warm_gangs_torchrun_starts_the_pods_processes_alone_and_the_trainer_joins_the_gang():
    pod = render(rank=1, nnodes=4, nprocPerNode=8,
                 restartPolicy={"inPlace": True, "warm": True})  # fmt: skip

    env = env_of(pod)
    assert (env["PET_NNODES"], env["PET_STANDALONE"], env["PET_NPROC_PER_NODE"]) == ("1", "1", "8")
    assert env[contract.ENV_WARM_RESTART] == "true"
    assert env[contract.ENV_GANG_ADDR] == "grpo-n0.grpo.ns.svc"
    assert env[contract.ENV_GANG_PORT] == "29500"
    assert (env[contract.ENV_NODE_RANK], env[contract.ENV_NNODES]) == ("1", "4")
    assert contract.ENV_WARM_RESTART not in env_of(render(rank=1, restartPolicy={"inPlace": True}))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"restartPolicy": {"warm": True}}, "needs spec.restartPolicy.inPlace"),
        ({"restartPolicy": {"inPlace": True, "warm": True}, "backend": "megatron"},
         "got rljob/megatron/torchrun"),
        ({"restartPolicy": {"inPlace": True, "warm": True}, "framework": "verl",
          "command": ["python3", "-m", "verl.trainer.main_ppo"]}, "got verl/fsdp/ray"),
    ],
)  # fmt: skip
def test_warm_is_for_rljobs_own_fsdp_trainer_with_in_place_pods(spec, message):
    with pytest.raises(SpecError, match=f"spec.restartPolicy.warm: .*{message}"):
        parse_spec(make_job(**spec)["spec"])
    assert parse_spec(
        make_job(restartPolicy={"inPlace": True, "warm": True})["spec"]
    ).restart_policy.warm
