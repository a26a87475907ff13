"""Builders, waits and checks for the end-to-end tests: real trainers on node agents.

Every e2e job runs the reference trainer's packaged config, shrunk (TINY) and cut to
MAX_STEPS with a checkpoint every SAVE_INTERVAL steps, on a world of 2 ranks: 2 nodes
x 1 process or 1 node x 2 processes. The same config and world size make the same
weights, so one uninterrupted reference run serves every rljob test of a backend.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import rljob_contract as contract
from kube_steps import wait_for
from kubernetes import client
from kubernetes.client.rest import ApiException
from rljob_contract.steps import step_dir_name
from rljob_operator import constants as c
from rljob_operator.api.reasons import Phase
from rljob_operator.api.timestamps import parse_iso
from rljob_testenv import cached, scenario
from rljob_testenv.scenario import read_progress, trainer_pods
from rljob_trainer.metrics import read_metrics
from tiny_trainer import TINY

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "trainer_image" / "rljob_trainer" / "configs" / "grpo_tiny.yaml"
MAX_STEPS = 24
SAVE_INTERVAL = 4
WORLD_SIZE = 2
POOL_LABEL = "rljob.io/e2e-pool"
CLAIM = "ckpts"
MOUNT = "/checkpoints"

T = TypeVar("T")


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


# --------------------------------------------------------------------------- the job
# The Megatron backend's e2e shape: one model split over the two ranks (tensor parallel).
MEGATRON_ARGS = ("megatron.tensor_model_parallel_size=2",)


def trainer_args(output_dir: str, extra: Sequence[str] = ()) -> list[str]:
    return [
        "--config", str(CONFIG), f"runner.output_dir={output_dir}", *TINY,
        f"runner.max_steps={MAX_STEPS}", *extra,
    ]  # fmt: skip


def experiment_path(job: str) -> str:
    """Where the job's run lives, inside the containers."""
    return f"{job}/grpo_tiny"


def rljob_job(
    name: str,
    nnodes: int,
    nproc: int,
    port: int,
    pool: str,
    priority_class: str | None = None,
    max_failures: int = 2,
    backend: str = "fsdp",
) -> dict[str, Any]:
    template_spec: dict[str, Any] = {
        "nodeSelector": {POOL_LABEL: pool},
        "terminationGracePeriodSeconds": 60,
    }
    if priority_class:
        template_spec["priorityClassName"] = priority_class
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": name},
        "spec": {
            "framework": "rljob",
            "backend": backend,
            "image": "rljob-trainer:dev",
            "nnodes": nnodes,
            "nprocPerNode": nproc,
            "rendezvousPort": port,
            "args": trainer_args(f"{MOUNT}/{name}", MEGATRON_ARGS if backend == "megatron" else ()),
            "resources": {"limits": {"nvidia.com/gpu": nproc}},
            "checkpoint": {
                "volume": {"persistentVolumeClaim": {"claimName": CLAIM}},
                "mountPath": MOUNT,
                "directory": f"{experiment_path(name)}/checkpoints",
                "layout": "rljob",
                "saveInterval": SAVE_INTERVAL,
            },
            "restartPolicy": {"maxFailures": max_failures, "failureBackoffSeconds": 0},
            "template": {"spec": template_spec},
        },
    }


def one_pod_per_node(job: str) -> dict[str, Any]:
    """The pod template's affinity that puts the job's pods on nodes of their own (required
    anti-affinity), as a user asks for one pod per GPU node."""
    term = {"labelSelector": {"matchLabels": {c.LABEL_JOB: job}},
            "topologyKey": "kubernetes.io/hostname"}  # fmt: skip
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


@contextmanager
def priority_classes_made(api_client, prefix: str) -> Iterator[tuple[str, str]]:
    """(low, high) PriorityClasses for a test, deleted after it: the job runs low; a pod of the
    high class preempts it."""
    scheduling = client.SchedulingV1Api(api_client)
    names = (f"{prefix}-low", f"{prefix}-high")
    for name, value in zip(names, (100, 1000), strict=True):
        scheduling.create_priority_class(
            client.V1PriorityClass(metadata=client.V1ObjectMeta(name=name), value=value)
        )
    try:
        yield names
    finally:
        for name in names:
            scheduling.delete_priority_class(name)


def jobs_api(api_client) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


def create_job(api_client, namespace: str, body: dict[str, Any]) -> None:
    jobs_api(api_client).create_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, body
    )


def get_job(api_client, namespace: str, name: str) -> dict[str, Any]:
    return jobs_api(api_client).get_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, name
    )


def status(api_client, namespace: str, name: str) -> dict[str, Any]:
    return get_job(api_client, namespace, name).get("status") or {}


def wait_succeeded(api_client, namespace: str, name: str, timeout: float = 240) -> dict[str, Any]:
    def done():
        job = get_job(api_client, namespace, name)
        phase = (job.get("status") or {}).get("phase")
        if phase == Phase.FAILED:
            raise AssertionError(f"the job failed: {json.dumps(job['status'], indent=1)}")
        return job if phase == Phase.SUCCEEDED else None

    return wait_for(done, timeout, f"job {name} to succeed")


def running_gang(core, namespace: str, attempt: int, nnodes: int, timeout: float = 120):
    def gang():
        pods = [p for p in trainer_pods(core, namespace, attempt) if p.status.phase == "Running"]
        return pods if len(pods) == nnodes else None

    return wait_for(gang, timeout, f"the gang of attempt {attempt} to run")


# --------------------------------------------------------------------------- disruptions
def evict(core, namespace: str, pod: str) -> None:
    core.create_namespaced_pod_eviction(pod, namespace, client.V1Eviction(
        metadata=client.V1ObjectMeta(name=pod, namespace=namespace)))  # fmt: skip


def delete_pods(core, namespace: str, selector: str) -> None:
    for pod in core.list_namespaced_pod(namespace, label_selector=selector).items:
        try:
            core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise


# --------------------------------------------------------------------------- what the trainer wrote
def wait_step(checkpoint_dir: Path, step: int, attempt: int, timeout: float = 180) -> int:
    """Until attempt `attempt` has finished step `step` (per progress.json)."""

    def reached():
        progress = read_progress(checkpoint_dir) or {}
        if progress.get("attempt") == attempt and progress.get("step", 0) >= step:
            return progress["step"]
        return None

    return wait_for(reached, timeout, f"attempt {attempt} to finish step {step}")


SAVED = re.compile(r"saved checkpoint \S*/global_step_(\d+)")
STEP = re.compile(r"INFO rljob_trainer\.train: step (\d+)/\d+ ")
RESUMED = re.compile(r"resumed from (\S+) at step (\d+)")


def saved_steps(log: str) -> list[int]:
    return [int(m) for m in SAVED.findall(log)]


def logged_steps(log: str) -> list[int]:
    return [int(m) for m in STEP.findall(log)]


def resumed_from(log: str) -> tuple[str, int] | None:
    match = RESUMED.search(log)
    return (match.group(1), int(match.group(2))) if match else None


# --------------------------------------------------------------------------- the reference run
def run_reference(nproc: int = WORLD_SIZE, timeout: float = 300, backend: str = "fsdp") -> Path:
    """The same config, never interrupted, under a plain local torchrun: its checkpoint dir,
    made once for the config, the trainer's source and torch's version (rljob_testenv.cached:
    read it, never write into it)."""
    env = {"RLJOB_SAVE_INTERVAL": str(SAVE_INTERVAL), contract.ENV_BACKEND: backend}
    extra = MEGATRON_ARGS if backend == "megatron" else ()
    versions = ("torch", "megatron-core") if backend == "megatron" else ("torch",)
    sources = (REPO / "trainer_image" / "rljob_trainer", REPO / "contract" / "rljob_contract")
    key = cached.inputs_key([trainer_args("OUT", extra), env, nproc], sources, versions)

    def run(folder: Path) -> None:
        args = trainer_args(str(folder / "run"), extra)
        scenario.run_reference(args, env, folder / "reference.log", nproc, timeout)

    folder, _ = cached.run_once(f"rljob-{backend}", key, run)
    return folder / "run" / "grpo_tiny" / "checkpoints"


def assert_same_run_as_reference(checkpoint_dir: Path, reference_dir: Path) -> None:
    """The final state bitwise equal to the uninterrupted run's (FSDP: the gathered model;
    Megatron: every tensor of its dist_checkpointing save), and equal metrics at every step."""
    from rljob_trainer.megatron.checkpoint import iteration_dir  # megatron only when needed

    iteration = f"{step_dir_name(MAX_STEPS)}/{iteration_dir(MAX_STEPS)}"
    if (checkpoint_dir / iteration).is_dir():
        differ = scenario.differing_saved_state(
            checkpoint_dir / iteration, reference_dir / iteration
        )
    else:
        model = scenario.final_model(checkpoint_dir, MAX_STEPS)
        differ = scenario.differing_tensors(model, scenario.final_model(reference_dir, MAX_STEPS))
    assert not differ, f"tensors differ from the uninterrupted run: {differ}"
    metrics = read_metrics(checkpoint_dir.parent / "metrics.jsonl")
    reference = read_metrics(reference_dir.parent / "metrics.jsonl")
    assert [e["step"] for e in metrics] == list(range(1, MAX_STEPS + 1))
    differ = scenario.differing_steps(metrics, reference)
    assert not differ, f"steps {differ} differ from the uninterrupted run"


# --------------------------------------------------------------------------- verifying a run
REPORTS: list[str] = []  # printed at the end of the session (conftest's terminal summary)


def attempts_of(records, job: str) -> dict[int, list]:
    """The agents' launch records of a job's trainer pods, by attempt, rank 0's pod first."""
    by_attempt: dict[int, list] = {}
    for record in records:
        labels = record.labels
        if labels.get(c.LABEL_JOB) == job and labels.get(c.LABEL_ROLE) == c.ROLE_TRAINER:
            by_attempt.setdefault(int(labels[c.LABEL_ATTEMPT]), []).append(record)
    for pods in by_attempt.values():
        pods.sort(key=lambda r: int(r.labels[c.LABEL_NODE_RANK]))
    return dict(sorted(by_attempt.items()))


def _seconds(start: str | None, end: str | None) -> str:
    if not start or not end:
        return "?"
    return f"{(parse_iso(end) - parse_iso(start)).total_seconds():.1f}s"


def verify_rljob_run(
    job: dict[str, Any],
    records,
    checkpoint_dir: Path,
    reference_dir: Path,
    expected: list[tuple[str, set[str]]],
    title: str,
    progress_slack: int = 0,
) -> str:
    """Check every recovery of a finished rljob job against what its trainers logged, then
    its metrics and final weights against the uninterrupted reference; return a report.

    `expected`: per recovery, its kind and the reasons accepted. `progress_slack`: how far
    progress.json may run ahead of the last step logged (a SIGKILL can land in between).
    """
    name, st = job["metadata"]["name"], job["status"]
    recoveries = st.get("recoveries") or []
    lines = [f"{title}: {len(recoveries)} recoveries, attempt {st['attempt']}, {st['phase']}"]
    shown = json.dumps(recoveries, indent=1)
    assert len(recoveries) == len(expected), f"expected {len(expected)} recoveries: {shown}"
    for recovery, (kind, reasons) in zip(recoveries, expected, strict=True):
        assert recovery["kind"] == kind and recovery["reason"] in reasons, shown
    assert st["attempt"] == len(expected)
    assert st["preemptions"] == sum(kind == "Disruption" for kind, _ in expected)
    assert st["failures"] == sum(kind == "Failure" for kind, _ in expected)
    attempts = attempts_of(records, name)
    assert sorted(attempts) == list(range(len(expected) + 1)), f"attempts run: {sorted(attempts)}"
    newest, resumes = 0, [0]
    for k, recovery in enumerate(recoveries):
        before = attempts[k][0].log()
        newest = max([newest, *saved_steps(before)])
        last_logged = max(logged_steps(before), default=resumes[-1])
        folder = f"{checkpoint_dir}/global_step_{newest}"
        assert recovery.get("resumedFromStep") == newest, (
            f"recovery {k + 1} resumed from {recovery.get('resumedFromStep')}, but the newest "
            f"complete checkpoint attempt {k} sealed is step {newest}"
        )
        finished = recovery["lastFinishedStep"]
        assert last_logged <= finished <= last_logged + progress_slack, (
            f"recovery {k + 1}: progress.json said {finished}, attempt {k} logged {last_logged}"
        )
        assert recovery["lostSteps"] == finished - newest
        for record in attempts[k + 1]:
            assert record.env["RLJOB_RESUME_DIR"] == folder
            assert f"runner.resume_dir={folder}" in record.argv
        assert resumed_from(attempts[k + 1][0].log()) == (folder, newest)
        resumes.append(newest)
        lines.append(
            f"  recovery {k + 1}: {recovery['kind']} {recovery['reason']} of pod {recovery['pod']} "
            f"on {recovery['node']}: last finished step {finished}, resumed from {newest}, "
            f"lost {recovery['lostSteps']}; detected -> new gang {_seconds(recovery.get('detectedAt'), recovery.get('gangCreatedAt'))}"
            f" -> running {_seconds(recovery.get('gangCreatedAt'), recovery.get('firstRunningAt'))}"
        )
    assert_same_run_as_reference(checkpoint_dir, reference_dir)
    for entry in read_metrics(checkpoint_dir.parent / "metrics.jsonl"):
        doer = max(a for a, start in enumerate(resumes) if start < entry["step"])
        assert entry["attempt"] == doer, (
            f"step {entry['step']} logged by attempt {entry['attempt']}"
        )
    lines.append(
        f"  final weights bitwise equal to the uninterrupted run; metrics of all {MAX_STEPS} "
        "steps equal"
    )
    return "\n".join(lines)


def assert_nothing_left(pool, port: int, api_client, core, namespace: str, name: str) -> None:
    """No process of any pod, the rendezvous port free; deleting the job leaves no pod."""
    left = wait_for(lambda: pool.live_processes() == [] or None, 10, "pod processes to end")
    assert left
    assert port_is_free(port), f"rendezvous port {port} is still taken"
    jobs_api(api_client).delete_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, name
    )
    wait_for(
        lambda: not core.list_namespaced_pod(namespace, label_selector=f"{c.LABEL_JOB}={name}").items,
        60, "the job's pods to be deleted",
    )  # fmt: skip
