"""Render the gang: one pod per node and a headless service, as plain dicts.

Each pod runs the trainer under its launcher (launcher.launchers): torchrun on every node
(rljob's trainer), or a Ray node on every pod with the driver on the head (RLinf, verl).

What the objects are called and how they point back at their job is launcher.identity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import rljob_contract as contract

from .. import constants as c
from ..api.spec import JobSpec, SpecError
from ..frameworks import framework, resume_overrides
from . import in_place, podside, readiness, template
from .identity import (
    JobRef,
    attempt_name,
    host_name,
    labels,
    owner_reference,
    pod_name,
    service_name,
)
from .launchers import launcher_of


@dataclass(frozen=True)
class ResumeTarget:
    path: str
    step: int


@dataclass(frozen=True)
class Placement:
    """Who places the attempt's pods besides the template: a PodGroup of the Workload API
    (launcher.gang), and a Kueue LocalQueue, which admits the attempt's pods as one group."""

    pod_group: str | None = None
    queue: str | None = None


def master_address(job: JobRef) -> str:
    return f"{host_name(job.name, 0)}.{service_name(job.name)}.{job.namespace}.svc"


def resume_arguments(spec: JobSpec, target: ResumeTarget) -> list[str]:
    """The framework's own switch that makes it resume from `target` (ValueError if it can't)."""
    template = spec.checkpoint.resume_args_template
    return resume_overrides(spec.framework, target.path, custom_template=template)


def _own_env(
    spec: JobSpec, job: JobRef, attempt: int, rank: int, resume: ResumeTarget | None
) -> list[dict[str, Any]]:
    """The variables rljob sets itself; they win over spec.env entries of the same name."""
    values: dict[str, str] = {
        **launcher_of(spec).env(spec, master_address(job), rank),
        contract.ENV_ATTEMPT: str(attempt),
        contract.ENV_CHECKPOINT_DIR: spec.checkpoint.path,
        contract.ENV_CHECKPOINT_REQUEST_FILE: (
            f"{contract.PODINFO_MOUNT_PATH}/{contract.CHECKPOINT_REQUEST_FILE_NAME}"
        ),
        contract.ENV_TERMINATION_LOG: contract.DEFAULT_TERMINATION_LOG,
        contract.ENV_GRACE_SECONDS: str(spec.grace_seconds),
    }
    values.update(framework(spec.framework).pod_env(spec, rank))
    if spec.restart_policy.in_place:
        values.update(in_place.env())
    if readiness.marks_steps(spec, rank):
        values.update(readiness.env(readiness.marker(job, attempt, rank)))
    if spec.checkpoint.save_interval is not None:
        values[contract.ENV_SAVE_INTERVAL] = str(spec.checkpoint.save_interval)
    if spec.checkpoint.max_to_keep is not None:
        values[contract.ENV_MAX_TO_KEEP] = str(spec.checkpoint.max_to_keep)
    if resume is not None:
        values[contract.ENV_RESUME_DIR] = resume.path.rstrip("/")
        values[contract.ENV_RESUME_STEP] = str(resume.step)
    ours = [{"name": k, "value": v} for k, v in values.items()]
    ours += [
        {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
        for name, path in (
            ("POD_NAME", "metadata.name"),
            ("POD_NAMESPACE", "metadata.namespace"),
            ("NODE_NAME", "spec.nodeName"),
        )
    ]
    return ours


# Set on the attempts that resume; a user's value would be taken for rljob's on the others.
RESUME_ENV = (contract.ENV_RESUME_DIR, contract.ENV_RESUME_STEP)


def _env(spec: JobSpec, job: JobRef, attempt: int, rank: int, resume: ResumeTarget | None):
    """spec.env, then rljob's own variables; a name in both is refused, naming it."""
    ours = _own_env(spec, job, attempt, rank, resume)
    taken = {e["name"] for e in ours} | set(RESUME_ENV)
    clash = sorted({e.get("name") for e in spec.env} & taken)
    if clash:
        raise SpecError("spec.env", f"{', '.join(clash)}: rljob sets these on the job's pods")
    return [*spec.env, *ours]


def _volumes(
    spec: JobSpec, job: JobRef, secret: str | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    source = spec.checkpoint.volume or {"emptyDir": {}}
    volumes = [
        {"name": c.CHECKPOINT_VOLUME, **source},
        {
            "name": c.PODINFO_VOLUME,
            "downwardAPI": {
                "items": [
                    {
                        "path": contract.CHECKPOINT_REQUEST_FILE_NAME,
                        "fieldRef": {
                            "fieldPath": (
                                f"metadata.annotations['{contract.CHECKPOINT_REQUEST_ANNOTATION}']"
                            )
                        },
                    }
                ]
            },
        },
    ]
    mounts = [
        {"name": c.CHECKPOINT_VOLUME, "mountPath": spec.checkpoint.mount_path},
        {"name": c.PODINFO_VOLUME, "mountPath": contract.PODINFO_MOUNT_PATH, "readOnly": True},
    ]
    launcher_volumes, launcher_mounts = launcher_of(spec).volumes(spec, job, secret)
    if spec.restart_policy.in_place:  # the run file beside the request, and the state dir
        volumes[1]["downwardAPI"]["items"].append(in_place.RUN_FILE_ITEM)
        state, state_mount = in_place.state_volume_and_mount()
        launcher_volumes, launcher_mounts = (
            [*launcher_volumes, state],
            [*launcher_mounts, state_mount],
        )
    return volumes + launcher_volumes, mounts + launcher_mounts


def _quantities_as_strings(resources: dict[str, Any]) -> dict[str, Any]:
    """The CRD takes `nvidia.com/gpu: 8`; a Pod wants the quantity as the string "8"."""
    return {
        kind: {name: str(value) for name, value in (amounts or {}).items()}
        for kind, amounts in resources.items()
    }


def desired_pod(
    spec: JobSpec,
    job: JobRef,
    attempt: int,
    rank: int,
    resume: ResumeTarget | None,
    placement: Placement = Placement(),
    secret: str | None = None,
) -> dict[str, Any]:
    """The pod of node `rank` in attempt `attempt`: rljob's parts merged into the template.

    Under torchrun every pod runs the trainer with its arguments; under Ray only the head
    runs the driver, so only the head gets the arguments and the resume switch. The
    `placement` names the attempt's PodGroup (the scheduler binds the gang all or nothing)
    and its Kueue queue (Kueue admits it as one pod group). Raises SpecError when the
    template sets a part that is rljob's. `secret` names the launcher's Secret (the Ray
    token's) as the job's status records it.
    """
    launcher = launcher_of(spec)
    volumes, mounts = _volumes(spec, job, secret)
    runs_trainer = not launcher.DRIVER_ON_HEAD or rank == 0
    args = list(spec.args) + (resume_arguments(spec, resume) if resume else [])
    ports = [{"name": "rendezvous", "containerPort": spec.rendezvous_port}]
    command = launcher.command(spec, rank)
    if spec.restart_policy.in_place:  # under rljob's wrapper, with its restart rule
        command = in_place.wrapped(command, podside.interpreter(spec.entry_command))
    container: dict[str, Any] = {
        "name": c.TRAINER_CONTAINER,
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": command,
        "args": args if runs_trainer else [],
        "env": _env(spec, job, attempt, rank, resume),
        "ports": ports + launcher.container_ports(spec, rank),
        "volumeMounts": mounts,
        "terminationMessagePath": contract.DEFAULT_TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        **(in_place.container_fields() if spec.restart_policy.in_place else {}),
    }
    stepped = readiness.marks_steps(spec, rank)
    marker = readiness.marker(job, attempt, rank)
    probe = readiness.probe(marker) if stepped else launcher.readiness_probe(rank)
    if probe:
        container["readinessProbe"] = probe
    if spec.resources:
        container["resources"] = _quantities_as_strings(spec.resources)
    pod_spec = {
        "restartPolicy": "Never",
        "hostname": host_name(job.name, rank),
        "subdomain": service_name(job.name),
        "terminationGracePeriodSeconds": spec.grace_seconds,
        "containers": [container],
        "volumes": volumes,
    }
    if placement.pod_group:
        pod_spec["schedulingGroup"] = {"podGroupName": placement.pod_group}
    metadata = {
        "name": pod_name(job.name, attempt, rank),
        "namespace": job.namespace,
        "labels": labels(job.name, attempt, rank),
        "annotations": {},
        "ownerReferences": [owner_reference(job)],
        "finalizers": [c.FINALIZER],
    }
    if placement.queue:  # Kueue's pod group: admitted, preempted and readmitted as one
        metadata["labels"][c.KUEUE_QUEUE_LABEL] = placement.queue
        metadata["labels"][c.KUEUE_POD_GROUP_LABEL] = attempt_name(job.name, attempt)
        metadata["annotations"][c.KUEUE_POD_GROUP_COUNT_ANNOTATION] = str(spec.nnodes)
        metadata["annotations"][c.KUEUE_RETRIABLE_ANNOTATION] = "false"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": template.merge_metadata(spec.template_metadata, metadata),
        "spec": template.merge_pod_spec(spec.template_spec, pod_spec),
    }


def run_in_place(
    spec: JobSpec, job: JobRef, attempt: int, rank: int, resume: ResumeTarget | None,
    restarts_now: int,
) -> dict[str, Any]:  # fmt: skip
    """The metadata patch that makes a pod kept from an ended gang rank `rank` of attempt
    `attempt`: the labels that pod would have, and the run (the arguments and the resume
    variables, which the pod's spec holds for its own attempt) that its wrapper starts."""
    runs_trainer = not launcher_of(spec).DRIVER_ON_HEAD or rank == 0
    args = list(spec.args) + (resume_arguments(spec, resume) if resume else [])
    args = args if runs_trainer else []  # a Ray worker: the driver runs on the head
    env: dict[str, str | None] = dict.fromkeys(RESUME_ENV)
    if resume is not None:
        env.update({contract.ENV_RESUME_DIR: resume.path.rstrip("/"),
                    contract.ENV_RESUME_STEP: str(resume.step)})  # fmt: skip
    return in_place.run_patch(attempt, args, env, restarts_now, labels(job.name, attempt, rank))


def check_template(spec: JobSpec, job: JobRef) -> None:
    """Raise SpecError if the template sets a part of a pod that is rljob's (the head's and
    a worker's differ under Ray), before any attempt is created."""
    for rank in {0, spec.nnodes - 1}:
        desired_pod(spec, job, 0, rank, None)


def desired_pods(
    spec: JobSpec,
    job: JobRef,
    attempt: int,
    resume: ResumeTarget | None,
    placement: Placement = Placement(),
    secret: str | None = None,
) -> list[dict[str, Any]]:
    return [desired_pod(spec, job, attempt, rank, resume, placement, secret)
            for rank in range(spec.nnodes)]  # fmt: skip


def owned_by(job: JobRef) -> dict[str, Any]:
    """The metadata of what the job owns across its attempts: its labels, and the job as its
    controller (the garbage collector removes it with the job)."""
    return {"labels": labels(job.name), "ownerReferences": [owner_reference(job)]}


def desired_launcher_config_map(spec: JobSpec, job: JobRef) -> dict[str, Any] | None:
    """The launcher's files (the Ray launcher's, a torchrun bridge's), which the pods mount."""
    return launcher_of(spec).config_map(spec, job.name, job.namespace, owned_by(job))


def desired_secret(spec: JobSpec, job: JobRef, name: str) -> dict[str, Any] | None:
    """The gang's Secret named `name`, where its launcher has one (launcher.ray: the job's Ray
    token)."""
    return launcher_of(spec).secret(spec, job, owned_by(job), name)


def desired_network_policy(spec: JobSpec, job: JobRef) -> dict[str, Any] | None:
    """The gang's NetworkPolicy: its ports to its own pods only (launcher.network)."""
    return launcher_of(spec).network_policy(job.name, job.namespace, owned_by(job))


def desired_service(spec: JobSpec, job: JobRef) -> dict[str, Any]:
    """Headless, and publishing not-ready addresses so rendezvous resolves before readiness."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(job.name),
            "namespace": job.namespace,
            "labels": labels(job.name),
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {c.LABEL_JOB: job.name, c.LABEL_ROLE: c.ROLE_TRAINER},
            "ports": [
                {"name": name, "port": port}
                for name, port in {
                    "rendezvous": spec.rendezvous_port,
                    **launcher_of(spec).service_ports(spec),
                }.items()
            ],
        },
    }
