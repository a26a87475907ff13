"""The torchrun form of a gang (rljob's own trainer, custom trainers): torchrun on every pod,
rendezvous at node 0's stable DNS name, every pod running the trainer with its arguments."""

from __future__ import annotations

from typing import Any

from ..api.spec import JobSpec
from .identity import JobRef

DRIVER_ON_HEAD = False  # every pod runs the trainer; the job ends when all of them do


def command(spec: JobSpec, rank: int) -> list[str]:
    return torchrun_command(spec.entry_command)


def torchrun_command(entry: tuple[str, ...]) -> list[str]:
    """Wrap the trainer's entry point in torchrun, which reads its settings from PET_* vars."""
    if entry and entry[0] in ("python", "python3"):
        rest = list(entry[1:])
        return ["torchrun", *rest] if rest[:1] != ["-m"] else ["torchrun", "-m", *rest[1:]]
    return ["torchrun", "--no-python", *entry]


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


def volumes(spec: JobSpec, job: JobRef) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return [], []


def service_ports(spec: JobSpec) -> dict[str, int]:
    return {}


def config_map(job: str, namespace: str, metadata: dict[str, Any]) -> dict[str, Any] | None:
    return None


def network_policy(job: str, namespace: str, metadata: dict[str, Any]) -> dict[str, Any] | None:
    return None


def secret(spec: JobSpec, job: JobRef, metadata: dict[str, Any]) -> dict[str, Any] | None:
    return None
