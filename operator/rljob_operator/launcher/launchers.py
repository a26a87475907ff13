"""The ways a gang's pods start training (`spec.launcher`): each is a module with the functions
of `Launcher`, picked once by name, so that the renderer and the reconcile never branch on it.
A new launcher is a module and a line in LAUNCHERS."""

from __future__ import annotations

from typing import Any, Protocol

from ..api.spec import JobSpec
from . import ray, torchrun
from .identity import JobRef


class Launcher(Protocol):
    # Whether only the head (rank 0) runs the driver, which places the rest through its own
    # cluster, and the job ends with it; otherwise every pod runs the trainer.
    DRIVER_ON_HEAD: bool
    # Whether every job's pods load rljob's bridge whatever its framework (the Ray node
    # imports it in the driver and every worker), which then says in the progress record
    # whether it can save on notice (reconcile.policies.save_on_notice).
    ALWAYS_BRIDGED: bool
    # Whether the job's status shows the gang as a cluster with a driver on its head
    # (status.ray: reconcile.pod_facts.ray_status).
    CLUSTER_STATUS: bool

    def command(self, spec: JobSpec, rank: int) -> list[str]:
        """The container's command; the trainer's arguments follow where it runs the trainer."""
        ...

    def env(self, spec: JobSpec, master: str, rank: int) -> dict[str, str]:
        """The launcher's own variables; `master` is node 0's stable DNS name."""
        ...

    def bridge_unreachable(self, spec: JobSpec) -> str | None:
        """Why the job's framework's bridge, which this launcher ships, cannot reach its
        trainer (the command), where it cannot (reconcile.policies.save_on_notice)."""
        ...

    def container_ports(self, spec: JobSpec, rank: int) -> list[dict[str, Any]]: ...
    def readiness_probe(self, rank: int) -> dict[str, Any] | None: ...

    def volumes(
        self, spec: JobSpec, job: JobRef, secret: str | None = None
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(volumes, their mounts in the trainer container); `secret` names the launcher's
        Secret as the job's status records it."""
        ...

    def service_ports(self, spec: JobSpec) -> dict[str, int]:
        """Ports the job's headless Service names besides the rendezvous port."""
        ...

    def config_map(
        self, spec: JobSpec, job: str, namespace: str, metadata: dict[str, Any]
    ) -> dict[str, Any] | None:
        """A ConfigMap the pods mount, if the launcher ships files into them."""
        ...

    def secret(
        self, spec: JobSpec, job: JobRef, metadata: dict[str, Any], name: str
    ) -> dict[str, Any] | None:
        """A Secret the pods mount (a per-job token), named `name`, made with its values at its
        creation."""
        ...

    def network_policy(
        self, job: str, namespace: str, metadata: dict[str, Any]
    ) -> dict[str, Any] | None:
        """A NetworkPolicy that closes the gang's ports to all but its own pods: they would
        otherwise let anyone run code in them (launcher.network)."""
        ...


LAUNCHERS: dict[str, Launcher] = {"torchrun": torchrun, "ray": ray}


def launcher_of(spec: JobSpec) -> Launcher:
    return LAUNCHERS[spec.launcher]
