"""The node agent's pure rules: environment, `$(VAR)`, rewriting, downward-API files, exits,
status bodies and the Node. The operator's own pod is the main input."""

from __future__ import annotations

from pathlib import Path

import pytest
from rljob_nodeagent.render import (
    LOOPBACK,
    Exit,
    NodeShape,
    PodError,
    ReadinessProbe,
    Rewriter,
    claim_dir,
    command_line,
    container_mounts,
    downward_files,
    exit_code,
    expand,
    key_files,
    lease_manifest,
    local_path,
    log_tail,
    node_manifest,
    pending_status,
    pod_address,
    readiness_probe,
    resolve_env,
    running_status,
    terminated_status,
    termination_message,
)
from rljob_operator.api.spec import parse_spec
from rljob_operator.launcher.identity import JobRef
from rljob_operator.launcher.pods import ResumeTarget, desired_pod


def no_lookup(namespace, name):
    return None


def operator_pod(resume: ResumeTarget | None = None) -> dict:
    """A trainer pod exactly as the operator renders it, bound to a node."""
    spec = parse_spec({
        "image": "rljob-trainer:dev", "nnodes": 2, "nprocPerNode": 1, "rendezvousPort": 29600,
        "args": ["--config", "/app/configs/grpo_tiny.yaml", "runner.output_dir=/checkpoints/demo"],
        "checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "ckpts"}},
                       "directory": "demo/grpo_tiny/checkpoints"},
    })  # fmt: skip
    pod = desired_pod(spec, JobRef("demo", "team-a", "uid-1"), 2, 1, resume)
    pod["metadata"]["uid"] = "pod-uid"
    pod["spec"]["nodeName"] = "agent-1"
    return pod


def test_the_operators_pod_sees_local_paths_and_loopback():
    pod = operator_pod(ResumeTarget("/checkpoints/demo/grpo_tiny/checkpoints/global_step_40", 40))
    container = pod["spec"]["containers"][0]
    volumes = {v["name"]: Path(f"/local/{v['name']}") for v in pod["spec"]["volumes"]}
    mounts = container_mounts(container, volumes)
    message_path = container.get("terminationMessagePath", "/dev/termination-log")
    rewrite = Rewriter({**mounts, message_path: "/local/termination-log"})
    env = {k: rewrite(v) for k, v in resolve_env(pod, container, no_lookup, no_lookup).items()}
    argv = command_line(container, env, rewrite)

    assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == LOOPBACK
    assert env["PET_MASTER_PORT"] == "29600"
    assert env["RLJOB_CHECKPOINT_DIR"] == "/local/checkpoints/demo/grpo_tiny/checkpoints"
    assert env["RLJOB_RESUME_DIR"] == "/local/checkpoints/demo/grpo_tiny/checkpoints/global_step_40"
    assert env["RLJOB_CHECKPOINT_REQUEST_FILE"] == "/local/rljob-podinfo/checkpoint-request"
    # where the trainer writes its termination message: the pod's own file
    assert env["RLJOB_TERMINATION_LOG"] == "/local/termination-log"
    assert (env["POD_NAME"], env["POD_NAMESPACE"], env["NODE_NAME"]) == (
        "demo-a2-n1",
        "team-a",
        "agent-1",
    )
    assert argv[:3] == ["torchrun", "-m", "rljob_trainer"]
    assert "--config" in argv and "/app/configs/grpo_tiny.yaml" in argv  # not a mount: untouched
    assert "runner.output_dir=/local/checkpoints/demo" in argv
    assert (
        argv[-1] == "runner.resume_dir=/local/checkpoints/demo/grpo_tiny/checkpoints/global_step_40"
    )


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("/ckpt", "/L"),
        ("/ckpt/run/global_step_5", "/L/run/global_step_5"),
        ("runner.resume_dir=/ckpt/a", "runner.resume_dir=/L/a"),
        ("--dir /ckpt/a,/ckpt/b", "--dir /L/a,/L/b"),
        ("PATHS=/x:/ckpt/y", "PATHS=/x:/L/y"),
        ('"/ckpt/q"', '"/L/q"'),
        ("/ckptx/a", "/ckptx/a"),  # another folder
        ("/data/ckpt/a", "/data/ckpt/a"),  # not at a path's start
        ("file:///ckpt", "file:///ckpt"),
        ("/ckpt/run/deep/x", "/R/x"),  # the longest mount wins
        ("/ckpt/run/deeper", "/L/run/deeper"),
        ("/dev/termination-log", "/T"),
    ],
)
def test_mount_paths_are_rewritten_where_they_stand_as_paths(text, want):
    rewrite = Rewriter({"/ckpt/": "/L", "/ckpt/run/deep": "/R", "/dev/termination-log": "/T"})
    assert rewrite(text) == want


def test_a_rewritten_path_is_not_rewritten_again():
    assert Rewriter({"/a": "/a/b", "/a/b": "/zzz"})("/a/c") == "/a/b/c"


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("job-n0.job.ns.svc", LOOPBACK),
        ("job-n0.job.ns.svc.cluster.local", LOOPBACK),
        ("job.ns.svc:29500", f"{LOOPBACK}:29500"),
        ("--rdzv-endpoint=job-n0.job.ns.svc:29500", f"--rdzv-endpoint={LOOPBACK}:29500"),
        ("http://api.team.svc/x", f"http://{LOOPBACK}/x"),
        ("svc", "svc"),
        ("ns.svc", "ns.svc"),  # a namespace alone is no service
        ("job.ns.svcx", "job.ns.svcx"),
        ("job.ns.svc.example.com", "job.ns.svc.example.com"),
        ("my.job.ns.svc_x", "my.job.ns.svc_x"),
    ],
)
def test_service_names_resolve_to_loopback(text, want):
    assert Rewriter({})(text) == want


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("$(A)/x", "1/x"),
        ("$(A)$(B)", "12"),
        ("$(MISSING)", "$(MISSING)"),
        ("$$(A)", "$(A)"),
        ("$$", "$"),
        ("a$", "a$"),
        ("$(A", "$(A"),
        ("$A", "$A"),
    ],
)
def test_variable_references_expand_as_the_kubelet_expands_them(text, want):
    assert expand(text, {"A": "1", "B": "2"}) == want


def test_env_from_configmaps_field_refs_and_earlier_entries():
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"app": "x"},
                        "annotations": {"k": "v"}},
           "spec": {"nodeName": "n1"}}  # fmt: skip
    container = {
        "name": "c",
        "resources": {"limits": {"nvidia.com/gpu": "2"}},
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"},
                    {"secretRef": {"name": "gone", "optional": True}}],
        "env": [
            {"name": "A", "value": "a"},
            {"name": "B", "value": "$(A)-$(CM_X)-$(C)"},  # C is defined later: kept as written
            {"name": "C", "value": "c"},
            {"name": "CM_X", "value": "override"},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "GPUS", "valueFrom": {"resourceFieldRef": {"resource": "limits.nvidia.com/gpu"}}},
            {"name": "KEY", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "X"}}},
            {"name": "OPT", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k", "optional": True}}},
        ],
    }  # fmt: skip

    def config_maps(namespace, name):
        return {"X": "from-cm"} if (namespace, name) == ("ns", "cm") else None

    env = resolve_env(pod, container, config_maps, no_lookup)
    assert env["B"] == "a-from-cm-$(C)"
    assert env["CM_X"] == "override"
    assert (env["IP"], env["APP"], env["GPUS"], env["KEY"]) == (LOOPBACK, "x", "2", "from-cm")
    assert "OPT" not in env


def test_a_missing_configmap_or_field_keeps_the_pod_from_starting():
    pod = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {}}
    with pytest.raises(PodError, match='configmap "cm" not found'):
        resolve_env(pod, {"envFrom": [{"configMapRef": {"name": "cm"}}]}, no_lookup, no_lookup)
    bad_field = {"env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.nope"}}}]}
    with pytest.raises(PodError, match="unsupported fieldRef"):
        resolve_env(pod, bad_field, no_lookup, no_lookup)


def test_the_checkpoint_request_file_follows_the_annotation():
    pod = operator_pod()
    items = next(v for v in pod["spec"]["volumes"] if "downwardAPI" in v)["downwardAPI"]["items"]
    assert downward_files(pod, None, items) == {"checkpoint-request": ""}
    pod["metadata"]["annotations"]["rljob.io/checkpoint-request"] = "2026-01-01T00:00:00Z"
    assert downward_files(pod, None, items) == {"checkpoint-request": "2026-01-01T00:00:00Z"}


def test_downward_maps_are_written_as_quoted_lines():
    pod = {"metadata": {"labels": {"b": "2", "a": 'say "hi"'}}}
    items = [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]
    assert downward_files(pod, None, items) == {"labels": 'a="say \\"hi\\""\nb="2"'}


def test_configmap_items_and_unsafe_paths():
    assert key_files({"a": "1", "b": "2"}, None) == {"a": "1", "b": "2"}
    assert key_files({"a": "1", "b": "2"}, [{"key": "a", "path": "conf/a.txt"}]) == {
        "conf/a.txt": "1"
    }
    with pytest.raises(PodError, match="not found"):
        key_files({"a": "1"}, [{"key": "z"}])
    with pytest.raises(PodError, match="not relative"):
        key_files({"a": "1"}, [{"key": "a", "path": "../../etc/passwd"}])


def test_container_mounts_with_subpaths_and_unknown_volumes():
    container = {"volumeMounts": [{"name": "v", "mountPath": "/a"},
                                  {"name": "v", "mountPath": "/b", "subPath": "sub/dir"}]}  # fmt: skip
    assert container_mounts(container, {"v": Path("/L")}) == {"/a": "/L", "/b": "/L/sub/dir"}
    with pytest.raises(PodError, match="no volume 'v'"):
        container_mounts(container, {})
    assert local_path("/b/x/y", {"/a": "/L", "/b": "/M"}) == "/M/x/y"
    assert local_path("/c", {"/a": "/L"}) is None


def test_a_container_without_a_command_runs_a_placeholder():
    assert command_line({"args": ["ignored"]}, {}, str) == ["sleep", "infinity"]
    assert command_line({"command": ["echo", "$(X)"]}, {"X": "1"}, str) == ["echo", "1"]


def test_pods_get_stable_private_addresses_the_endpoint_controllers_accept():
    address = pod_address("uid-1")
    assert address == pod_address("uid-1") != pod_address("uid-2")
    first, second, third, fourth = (int(x) for x in address.split("."))
    assert (first, second) == (10, 88) and 0 <= third <= 255 and 1 <= fourth <= 254


def test_claims_are_shared_per_namespace_and_name():
    assert claim_dir(Path("/root"), "ns", "ckpts") == Path("/root/claims/ns/ckpts")


@pytest.mark.parametrize(("returncode", "code"), [(0, 0), (1, 1), (75, 75), (-9, 137), (-15, 143)])
def test_exit_codes_of_signals_are_128_plus_the_signal(returncode, code):
    assert exit_code(returncode) == code


def test_the_termination_message_file_wins_then_the_log_on_error():
    assert termination_message("report", "log", "File", 1) == "report"
    assert termination_message("", "log", "File", 1) == ""
    assert termination_message("  \n", "a\nb", "FallbackToLogsOnError", 1) == "a\nb"
    assert termination_message(None, "a\nb", "FallbackToLogsOnError", 0) == ""
    assert len(termination_message("x" * 5000, "", "File", 0)) == 4096


def test_the_log_tail_is_80_lines_and_2048_bytes_at_most():
    many = "\n".join(str(i) for i in range(200))
    assert log_tail(many).splitlines() == [str(i) for i in range(120, 200)]
    assert len(log_tail("y" * 5000).encode()) == 2048


def test_status_bodies_move_the_container_from_waiting_to_running_to_terminated():
    pod = operator_pod()
    pending = pending_status(pod, "T0", "10.88.0.9")["status"]
    assert pending["phase"] == "Pending"
    assert pending["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating"

    running = running_status(pod, "T1", "id://1", "10.88.0.9")["status"]
    state = running["containerStatuses"][0]["state"]
    assert running["phase"] == "Running" and running["podIP"] == "10.88.0.9"
    assert state == {"running": {"startedAt": "T1"}, "waiting": None, "terminated": None}
    assert {c["type"]: c["status"] for c in running["conditions"]}["Ready"] == "True"

    failed = terminated_status(pod, Exit(1, "Error", "boom", "T1", "T2"), "id://1", "10.88.0.9")[
        "status"
    ]
    terminated = failed["containerStatuses"][0]["state"]["terminated"]
    assert failed["phase"] == "Failed"
    assert terminated == {"exitCode": 1, "reason": "Error", "message": "boom", "startedAt": "T1",
                          "finishedAt": "T2", "containerID": "id://1"}  # fmt: skip
    assert failed["containerStatuses"][0]["state"]["running"] is None  # merge-patch removes it

    done = terminated_status(pod, Exit(0, "Completed", "", "T1", "T2"), "id://1", "10.88.0.9")[
        "status"
    ]
    assert done["phase"] == "Succeeded"
    assert "message" not in done["containerStatuses"][0]["state"]["terminated"]


def test_the_node_is_a_gpu_node_that_kwok_leaves_alone():
    node = node_manifest("agent-0", NodeShape(gpus=2), {"pool": "a"}, now="T")
    assert "kwok.x-k8s.io/node" not in node["metadata"]["annotations"]
    labels = node["metadata"]["labels"]
    assert labels["pool"] == "a" and labels["kubernetes.io/hostname"] == "agent-0"
    assert labels["nvidia.com/gpu.present"] == "true"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "2"
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True" and ready["lastHeartbeatTime"] == "T"
    lease = lease_manifest("agent-0", "uid-0", "R")
    assert lease["metadata"]["namespace"] == "kube-node-lease"
    assert lease["metadata"]["ownerReferences"][0]["uid"] == "uid-0"


def ray_head_pod() -> dict:
    """Rank 0 of a verl job as the operator renders it: its readiness probe reads a file."""
    spec = parse_spec({"image": "verl:1", "framework": "verl", "nnodes": 2,
                       "command": ["python3", "-m", "verl.trainer.main_ppo"]})  # fmt: skip
    pod = desired_pod(spec, JobRef("v", "team-a", "uid-1"), 0, 0, None)
    pod["metadata"]["uid"] = "pod-uid"
    return pod


def test_an_exec_readiness_probe_is_rewritten_like_the_command():
    container = ray_head_pod()["spec"]["containers"][0]
    rewrite = Rewriter({"/tmp/ray": "/local/ray-tmp"})
    probe = readiness_probe(container, {}, rewrite)
    assert probe == ReadinessProbe(["test", "-e", "/tmp/rljob-trained-uid-1-v-a0-n0"], 1, 1, 1, 1)
    assert (
        readiness_probe({"name": "c", "readinessProbe": {"httpGet": {"port": 80}}}, {}, rewrite)
        is None
    )


def test_a_condition_keeps_its_transition_time_while_its_status_stays_as_a_kubelet_does():
    """The trainer took its mark back at T2 (its last step), its container ended at T3:
    Ready has been False since T2, as a kubelet reports it; a status that flips moves it."""
    pod = ray_head_pod()
    pod |= running_status(pod, "T1", "id://1", "10.88.0.9", ready=True, now="T1")
    pod |= running_status(pod, "T1", "id://1", "10.88.0.9", ready=False, now="T2")
    ended = terminated_status(pod, Exit(0, "Completed", "", "T1", "T3"), "id://1", "10.88.0.9")

    conditions = {c["type"]: c for c in ended["status"]["conditions"]}
    assert (conditions["Ready"]["status"], conditions["Ready"]["lastTransitionTime"]) == (
        "False", "T2",
    )  # fmt: skip
    assert conditions["Initialized"]["lastTransitionTime"] == "T1"


def test_a_running_pod_that_is_not_ready_says_so():
    status = running_status(ray_head_pod(), "T1", "id://1", "10.88.0.9", ready=False, now="T2")[
        "status"
    ]
    ready = {c["type"]: c for c in status["conditions"]}["Ready"]
    assert (ready["status"], ready["reason"], ready["lastTransitionTime"]) == (
        "False",
        "ContainersNotReady",
        "T2",
    )
    assert status["containerStatuses"][0]["ready"] is False
