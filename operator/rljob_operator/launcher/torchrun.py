"""The torchrun form of a gang (rljob's own trainer, TRL, custom trainers): torchrun on every
pod, rendezvous at node 0's stable DNS name, every pod running the trainer with its arguments.

Where the framework has a bridge into its loop (frameworks: `Framework.bridge`, TRL's Trainer),
every worker starts in that pod-side program, which runs the trainer's Python program; the
program comes with the job's launcher ConfigMap (launcher.podside)."""

from __future__ import annotations

from typing import Any

import rljob_contract as contract

from ..api.spec import JobSpec
from ..frameworks import framework
from . import in_place, podside
from .identity import JobRef
from .network import gang_network_policy

DRIVER_ON_HEAD = False  # every pod runs the trainer; the job ends when all of them do
ALWAYS_BRIDGED = False  # only where the framework has a bridge and the command can take it
CLUSTER_STATUS = False


# `python -m MODULE` programs that start the trainer in processes of their own (accelerate's,
# TRL's and DeepSpeed's launchers, torchrun's): a bridge in this process never sees its Trainer.
CHILD_LAUNCHERS = frozenset({
    "accelerate.commands.launch", "accelerate.commands.accelerate_cli", "trl.cli.main",
    "torch.distributed.run", "torch.distributed.launch", "deepspeed.launcher.runner",
})  # fmt: skip


def bridge_programs(spec: JobSpec) -> podside.Programs:
    """The framework's bridge into the trainer's loop, if it has one and the command is a
    Python program the bridge can run (the bridge first)."""
    bridge = framework(spec.framework).bridge_for(spec.launcher)
    program = python_program(spec.entry_command)
    return (bridge, podside.GUEST) if bridge and program and not child_launcher(program) else ()


def bridge_unreachable(spec: JobSpec) -> str | None:
    """Why the framework's bridge cannot reach the job's trainer, where it has one and cannot."""
    if not framework(spec.framework).bridge_for(spec.launcher):
        return None
    program = python_program(spec.entry_command)
    if program is None:
        return (f"the command {' '.join(spec.entry_command[:2])!r} is not `python SCRIPT` or "
                f"`python -m MODULE`, the program rljob's bridge into {spec.framework} starts "
                "under torchrun")  # fmt: skip
    if launcher := child_launcher(program):
        return (f"`python -m {launcher}` runs the trainer in child processes of its own, which "
                f"rljob's bridge into {spec.framework} does not reach: give the training script "
                "itself as the command (`python SCRIPT` or `python -m MODULE`), torchrun starts "
                "it on every process")  # fmt: skip
    return None


def podside_programs(spec: JobSpec) -> podside.Programs:
    """The pod-side programs the job's pods need: the bridge's, and the in-place wrapper
    where the job restarts in place."""
    return in_place.shipped(spec, bridge_programs(spec))


def child_launcher(program: list[str]) -> str | None:
    """The module of `-m MODULE ...` where it is a launcher that runs the trainer in child
    processes of its own."""
    module = program[1] if len(program) > 1 and program[0] == "-m" else None
    return module if module in CHILD_LAUNCHERS else None


def python_program(entry: tuple[str, ...]) -> list[str] | None:
    """`SCRIPT ARGS...` or `-m MODULE ARGS...` of `python ...`; None for any other command."""
    if entry and entry[0] in ("python", "python3"):
        return list(entry[1:])
    return None


def command(spec: JobSpec, rank: int) -> list[str]:
    programs = bridge_programs(spec)
    return torchrun_command(spec.entry_command, programs[0] if programs else None)


def torchrun_command(entry: tuple[str, ...], bridge: str | None = None) -> list[str]:
    """Wrap the trainer's entry point in torchrun, which reads its settings from PET_* vars;
    with a bridge, torchrun runs the bridge, which runs the trainer's program."""
    program = python_program(entry)
    if program is None:
        return ["torchrun", "--no-python", *entry]
    if bridge:
        return ["torchrun", f"{podside.LAUNCHER_DIR}/{bridge}", *program]
    return ["torchrun", *program] if program[:1] != ["-m"] else ["torchrun", "-m", *program[1:]]


def torchrun_shutdown_timeout(grace: int) -> int:
    """How long torchrun waits for its workers after SIGTERM before it SIGKILLs them.

    Its default is 30 s, whatever the pod's grace period: a save on SIGTERM that takes
    longer is killed half-written. Wait for nearly the whole grace period instead, and
    keep a little of it (10 s, or a quarter of a short one) for torchrun to exit and
    report before the kubelet's own SIGKILL.
    """
    return max(1, grace - min(10, grace // 4))


def env(spec: JobSpec, master: str, rank: int) -> dict[str, str]:
    return {
        **_torchrun_env(spec, master, rank),
        **(warm_env(spec, master, rank) if spec.restart_policy.warm else {}),
    }


def warm_env(spec: JobSpec, master: str, rank: int) -> dict[str, str]:
    """A warm gang (spec.restartPolicy.warm): torchrun starts this pod's processes alone (one
    node, its own rendezvous on a free local port), and rljob's trainer forms the gang's
    process group itself at node 0's name and the rendezvous port, once per attempt, so that
    a kept rank can join the next attempt's group in its own process (rljob_trainer.gang)."""
    return {
        "PET_NNODES": "1",
        "PET_STANDALONE": "1",
        contract.ENV_WARM_RESTART: "true",
        contract.ENV_GANG_ADDR: master,
        contract.ENV_GANG_PORT: str(spec.rendezvous_port),
        contract.ENV_NODE_RANK: str(rank),
        contract.ENV_NNODES: str(spec.nnodes),
    }


def _torchrun_env(spec: JobSpec, master: str, rank: int) -> dict[str, str]:
    return {
        **(podside.bridge_env(spec) if bridge_programs(spec) else {}),
        # Read by recent torchrun (its --shutdown-timeout; torch 2.15 has it, 2.7 has not).
        "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(torchrun_shutdown_timeout(spec.grace_seconds)),
        "MASTER_ADDR": master,
        "MASTER_PORT": str(spec.rendezvous_port),
        "NNODES": str(spec.nnodes),
        "NODE_RANK": str(rank),
        "NPROC_PER_NODE": str(spec.nproc_per_node),
        "PET_MASTER_ADDR": master,
        "PET_MASTER_PORT": str(spec.rendezvous_port),
        "PET_NNODES": str(spec.nnodes),
        "PET_NODE_RANK": str(rank),
        "PET_NPROC_PER_NODE": str(spec.nproc_per_node),
    }


def container_ports(spec: JobSpec, rank: int) -> list[dict[str, Any]]:
    return []


def readiness_probe(rank: int) -> dict[str, Any] | None:
    return None


def volumes(
    spec: JobSpec, job: JobRef, secret: str | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    programs = podside_programs(spec)
    if not programs:
        return [], []
    volume, mount = podside.volume_and_mount(job.name, programs)
    return [volume], [mount]


def service_ports(spec: JobSpec) -> dict[str, int]:
    return {}


def config_map(
    spec: JobSpec, job: str, namespace: str, metadata: dict[str, Any]
) -> dict[str, Any] | None:
    programs = podside_programs(spec)
    return podside.config_map(job, namespace, metadata, programs) if programs else None


def network_policy(job: str, namespace: str, metadata: dict[str, Any]) -> dict[str, Any] | None:
    """torchrun's c10d store on the rendezvous port, and the ports gloo and NCCL pick for
    themselves (none of them authenticates), answer the job's own pods only (launcher.network)."""
    return gang_network_policy(job, namespace, metadata, "torchrun")


def secret(
    spec: JobSpec, job: JobRef, metadata: dict[str, Any], name: str
) -> dict[str, Any] | None:
    return None
