"""The spec of an RLTrainingJob as frozen dataclasses, with the CRD's defaults.

The API server validates and defaults the spec (crds/rljob.io_rltrainingjobs.yaml);
this parser applies the same defaults again so that pure logic and tests can build
jobs from partial dicts, and turns anything that slipped through into SpecError
naming the field. It also resolves `checkpoint.layout: auto` where the framework alone
decides the layout (its module in frameworks/), once, for everything downstream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import rljob_contract as contract

from .. import frameworks

LAUNCHERS = ("torchrun", "ray")  # launcher.launchers.LAUNCHERS, held to it by a test
GANG_SCHEDULING = ("Auto", "Off")
DEFAULT_GRACE_SECONDS = 300  # the pods' terminationGracePeriodSeconds unless the template sets it


class SpecError(ValueError):
    """A spec the operator cannot run; `field` is the dotted path of the culprit."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class CheckpointSpec:
    mount_path: str = "/checkpoints"
    directory: str = ""
    volume: dict[str, Any] | None = None
    layout: str = "auto"
    verify: str = "quick"
    save_interval: int | None = None
    max_to_keep: int | None = None
    resume: str = "auto"
    resume_args_template: str | None = None

    @property
    def path(self) -> str:
        """The folder inside the containers that holds the global_step_N folders."""
        if not self.directory:
            return self.mount_path
        return self.mount_path.rstrip("/") + "/" + self.directory.strip("/")


@dataclass(frozen=True)
class RestartPolicy:
    max_failures: int = 3
    max_preemptions: int | None = None
    retryable_exit_codes: frozenset[int] = frozenset()
    failure_backoff_seconds: int = 10
    max_failure_backoff_seconds: int = 300
    node_not_ready_tolerance_seconds: int = 60
    # When a pod of a running gang is lost, keep the others and restart their trainers in
    # their pods (launcher.in_place), on kubelets with container restart rules.
    in_place: bool = False
    # With in_place, rljob's own trainer keeps its process and state on the kept pods
    # (rljob_trainer.warm): only the lost ranks start cold.
    warm: bool = False

    def failure_backoff(self, failures: int) -> int:
        """Seconds to wait after the `failures`-th failure: doubling, capped."""
        if failures <= 0:
            return 0
        backoff = self.failure_backoff_seconds * 2 ** (failures - 1)
        return min(backoff, self.max_failure_backoff_seconds)


@dataclass(frozen=True)
class RaySpec:
    """How the Ray cluster of a `launcher: ray` gang is started (see launcher.ray)."""

    port: int = 6379  # the head's GCS (ray start --port)
    dashboard_port: int = 8265
    client_port: int | None = None  # Ray client server; needs ray[client] in the image
    join_timeout_seconds: int = 600
    save_on_notice: bool | None = None  # deprecated spelling of JobSpec.save_on_notice
    token_auth: bool = True  # Ray's token authentication, with a token per job (launcher.ray)
    start_args: tuple[str, ...] = ()  # extra `ray start` flags on every node
    head_start_args: tuple[str, ...] = ()  # and on the head only (--include-dashboard, ...)

    @property
    def ports(self) -> dict[str, int]:
        ports = {"ray-gcs": self.port, "ray-dashboard": self.dashboard_port}
        if self.client_port is not None:
            ports["ray-client"] = self.client_port
        return ports


# Kueue reads its priority-boost annotation as a 32-bit signed integer; rljob's boost stays
# far inside it (see reconcile.boost.bounds).
MAX_PRIORITY_BOOST = 1_000_000


@dataclass(frozen=True)
class PriorityBoostSpec:
    """spec.queueing.priorityBoost: rljob sets Kueue's priority boost of the running attempt
    from the work it would lose if preempted now (reconcile.boost)."""

    enabled: bool = False
    max_boost: int | None = None  # None: the operator's limit (--max-priority-boost)
    gpu_seconds_per_point: int = 3600  # unsaved GPU-seconds per point of boost
    min_step: int = 1  # a change smaller than this is not written (except to 0 or max_boost)
    min_interval_seconds: int = 300  # at most one write per job this often


@dataclass(frozen=True)
class QueueingSpec:
    priority_boost: PriorityBoostSpec = PriorityBoostSpec()


@dataclass(frozen=True)
class JobSpec:
    image: str
    framework: str = "rljob"
    backend: str = "fsdp"
    image_pull_policy: str = "IfNotPresent"
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: tuple[dict[str, Any], ...] = ()
    nnodes: int = 1
    nproc_per_node: int = 1
    rendezvous_port: int = 29500
    launcher: str = "torchrun"
    ray: RaySpec = RaySpec()
    resources: dict[str, Any] = field(default_factory=dict)
    template_metadata: dict[str, Any] = field(default_factory=dict)
    template_spec: dict[str, Any] = field(default_factory=dict)
    checkpoint: CheckpointSpec = CheckpointSpec()
    restart_policy: RestartPolicy = RestartPolicy()
    gang_scheduling: str = "Auto"
    queueing: QueueingSpec = QueueingSpec()
    # Whether a framework that saves on notice through rljob's bridge does (spec.saveOnNotice,
    # or its deprecated spelling spec.ray.saveOnNotice): every bridge reads it.
    save_on_notice: bool = True
    suspend: bool = False
    ttl_seconds_after_finished: int | None = None

    @property
    def grace_seconds(self) -> int:
        """The pods' terminationGracePeriodSeconds: the time a trainer has to save on SIGTERM."""
        return int(self.template_spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS))

    @property
    def entry_command(self) -> tuple[str, ...]:
        if self.command:
            return self.command
        default = frameworks.framework(self.framework).default_command
        if default:
            return default
        raise SpecError("spec.command", f"is required for framework {self.framework!r}")


def _int(data: dict[str, Any], key: str, path: str, default: int | None, minimum: int = 0):
    value = data.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SpecError(f"{path}.{key}", f"must be an integer >= {minimum}, got {value!r}")
    return value


def _bool(data: dict[str, Any], key: str, path: str, default: bool) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise SpecError(f"{path}.{key}", f"must be true or false, got {value!r}")
    return value


def _bool_or_none(data: dict[str, Any], key: str, path: str) -> bool | None:
    """A boolean the spec may leave unset (None), where unset differs from either value."""
    return None if data.get(key) is None else _bool(data, key, path, False)


def _choice(data: dict[str, Any], key: str, path: str, default: str, choices: tuple[str, ...]):
    value = data.get(key, default)
    if value not in choices:
        raise SpecError(f"{path}.{key}", f"must be one of {', '.join(choices)}; got {value!r}")
    return value


def _strings(data: dict[str, Any], key: str, path: str) -> tuple[str, ...]:
    value = data.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(f"{path}.{key}", "must be a list of strings")
    return tuple(value)


def default_launcher(framework: str) -> str:
    return frameworks.framework(framework).launcher


def parse_ray(data: dict[str, Any]) -> RaySpec:
    path = "spec.ray"
    return RaySpec(
        port=_int(data, "port", path, 6379, minimum=1),
        dashboard_port=_int(data, "dashboardPort", path, 8265, minimum=1),
        client_port=_int(data, "clientPort", path, None, minimum=1),
        join_timeout_seconds=_int(data, "joinTimeoutSeconds", path, 600, minimum=1),
        save_on_notice=_bool_or_none(data, "saveOnNotice", path),
        token_auth=_bool(data, "tokenAuth", path, True),
        start_args=_strings(data, "startArgs", path),
        head_start_args=_strings(data, "headStartArgs", path),
    )


def _check_launcher(spec: JobSpec) -> None:
    """What the CRD's rules refuse, again, for specs built in code."""
    if spec.launcher != "ray":
        return
    if spec.nproc_per_node != 1:
        raise SpecError(
            "spec.nprocPerNode",
            "must be 1 with launcher 'ray': Ray places the workers, one pod is one Ray node",
        )
    ports = {**spec.ray.ports, "rendezvous": spec.rendezvous_port}
    if len(set(ports.values())) < len(ports):
        taken = ", ".join(f"{name} {port}" for name, port in ports.items())
        raise SpecError("spec.ray", f"the Ray ports and the rendezvous port must differ: {taken}")


def _no_parent_segments(value: str, field: str) -> None:
    if ".." in value.split("/"):
        raise SpecError(field, f"must not contain '..' segments, got {value!r}")


def _layout(data: dict[str, Any], framework: str) -> str:
    """The layout asked for, with `auto` resolved where the framework alone decides it."""
    layout = data.get("layout", "auto")
    if layout != "auto":
        return layout
    return frameworks.framework(framework).auto_layout or layout


def parse_checkpoint(data: dict[str, Any], framework: str) -> CheckpointSpec:
    path = "spec.checkpoint"
    for key in ("mountPath", "directory", "resume"):
        _no_parent_segments(str(data.get(key) or ""), f"{path}.{key}")
    resume = data.get("resume", "auto")
    if resume not in ("auto", "never") and not (isinstance(resume, str) and resume.startswith("/")):
        raise SpecError(f"{path}.resume", "must be 'auto', 'never' or an absolute path")
    return CheckpointSpec(
        mount_path=data.get("mountPath", "/checkpoints"),
        directory=data.get("directory", "") or "",
        volume=data.get("volume"),
        layout=_layout(data, framework),
        verify=data.get("verify", "quick"),
        save_interval=_int(data, "saveInterval", path, None, minimum=1),
        max_to_keep=_int(data, "maxToKeep", path, None, minimum=1),
        resume=resume.rstrip("/") if resume.startswith("/") and resume != "/" else resume,
        resume_args_template=data.get("resumeArgsTemplate"),
    )


def parse_restart_policy(data: dict[str, Any]) -> RestartPolicy:
    path = "spec.restartPolicy"
    return RestartPolicy(
        max_failures=_int(data, "maxFailures", path, 3),
        max_preemptions=_int(data, "maxPreemptions", path, None),
        retryable_exit_codes=frozenset(data.get("retryableExitCodes") or ()),
        failure_backoff_seconds=_int(data, "failureBackoffSeconds", path, 10),
        max_failure_backoff_seconds=_int(data, "maxFailureBackoffSeconds", path, 300),
        node_not_ready_tolerance_seconds=_int(data, "nodeNotReadyToleranceSeconds", path, 60),
        in_place=_bool(data, "inPlace", path, False),
        warm=_bool(data, "warm", path, False),
    )


def parse_queueing(data: dict[str, Any]) -> QueueingSpec:
    path = "spec.queueing.priorityBoost"
    boost = data.get("priorityBoost") or {}
    parsed = PriorityBoostSpec(
        enabled=_bool(boost, "enabled", path, False),
        max_boost=_int(boost, "maxBoost", path, None),
        gpu_seconds_per_point=_int(boost, "gpuSecondsPerPoint", path, 3600, minimum=1),
        min_step=_int(boost, "minStep", path, 1, minimum=1),
        min_interval_seconds=_int(boost, "minIntervalSeconds", path, 300, minimum=1),
    )
    if parsed.max_boost is not None and parsed.max_boost > MAX_PRIORITY_BOOST:
        raise SpecError(f"{path}.maxBoost", f"must be at most {MAX_PRIORITY_BOOST}")
    return QueueingSpec(priority_boost=parsed)


def parse_save_on_notice(spec: dict[str, Any]) -> bool:
    """spec.saveOnNotice, or its deprecated spelling spec.ray.saveOnNotice where it is unset;
    both set must agree (the CRD's rule, again)."""
    given = _bool_or_none(spec, "saveOnNotice", "spec")
    deprecated = _bool_or_none(spec.get("ray") or {}, "saveOnNotice", "spec.ray")
    if given is not None and deprecated is not None and given != deprecated:
        raise SpecError(
            "spec.saveOnNotice",
            f"is {str(given).lower()} and spec.ray.saveOnNotice, its deprecated spelling, is "
            f"{str(deprecated).lower()}: set spec.saveOnNotice alone",
        )
    return next((v for v in (given, deprecated) if v is not None), True)


def parse_spec(spec: dict[str, Any]) -> JobSpec:
    """Parse `.spec` of an RLTrainingJob; raise SpecError naming the first bad field."""
    image = spec.get("image")
    if not isinstance(image, str) or not image:
        raise SpecError("spec.image", "is required")
    template = spec.get("template") or {}
    framework = _choice(spec, "framework", "spec", "rljob", frameworks.NAMES)
    parsed = JobSpec(
        image=image,
        framework=framework,
        backend=_choice(spec, "backend", "spec", "fsdp", contract.BACKENDS),
        image_pull_policy=spec.get("imagePullPolicy", "IfNotPresent"),
        command=_strings(spec, "command", "spec"),
        args=_strings(spec, "args", "spec"),
        env=tuple(spec.get("env") or ()),
        nnodes=_int(spec, "nnodes", "spec", 1, minimum=1),
        nproc_per_node=_int(spec, "nprocPerNode", "spec", 1, minimum=1),
        rendezvous_port=_int(spec, "rendezvousPort", "spec", 29500, minimum=1),
        launcher=_choice(spec, "launcher", "spec", default_launcher(framework), LAUNCHERS),
        ray=parse_ray(spec.get("ray") or {}),
        resources=spec.get("resources") or {},
        template_metadata=template.get("metadata") or {},
        template_spec=template.get("spec") or {},
        checkpoint=parse_checkpoint(spec.get("checkpoint") or {}, framework),
        restart_policy=parse_restart_policy(spec.get("restartPolicy") or {}),
        gang_scheduling=_choice(spec, "gangScheduling", "spec", "Auto", GANG_SCHEDULING),
        queueing=parse_queueing(spec.get("queueing") or {}),
        save_on_notice=parse_save_on_notice(spec),
        suspend=bool(spec.get("suspend", False)),
        ttl_seconds_after_finished=_int(spec, "ttlSecondsAfterFinished", "spec", None),
    )
    parsed.entry_command  # noqa: B018 - raises SpecError for a custom job without a command
    _check_launcher(parsed)
    _check_warm(parsed)
    return parsed


def _check_warm(spec: JobSpec) -> None:
    """A warm restart is rljob's own FSDP trainer's, and it keeps the pods of an in-place one."""
    if not spec.restart_policy.warm:
        return
    if not spec.restart_policy.in_place:
        raise SpecError("spec.restartPolicy.warm", "needs spec.restartPolicy.inPlace: the trainer "
                        "keeps its process in a pod that stays")  # fmt: skip
    if (spec.framework, spec.backend, spec.launcher) != ("rljob", "fsdp", "torchrun"):
        got = f"{spec.framework}/{spec.backend}/{spec.launcher}"
        raise SpecError("spec.restartPolicy.warm", "is for rljob's own trainer (framework "
                        "'rljob', backend 'fsdp', launcher 'torchrun'), which keeps its state "
                        f"in memory; got {got}")  # fmt: skip
