"""When a trainer pod is Ready: once its attempt has finished a training step, where rljob sees
the framework's steps (frameworks: `reports_steps`).

The pod that runs the trainer (every torchrun pod; a Ray gang's head, which runs the driver)
gets the variable that names a marker file and a readiness probe that tests the file every
second. The trainer (rljob's own), rljob's bridge into the framework's loop (TRL), or the Ray
head's node program, from the bridge's progress record (verl, RLinf), creates the file once a
step of the attempt has finished in that container. So the pod turns Ready then, the pod watch
the operator already has delivers it, and no request is made per step (reconcile.policies.goodput).

The file is in the container's own /tmp, which a new container starts without, and not in a
volume of rljob's: an emptyDir would make `kubectl drain` refuse the pod ("local storage")
unless told to delete it, and the cluster autoscaler keep its node. Its name holds the job's
uid and the pod's, so that processes that share a /tmp (a node agent's pods) never read
another's. A read-only root filesystem without a writable /tmp keeps the pod not Ready: its
time counts as framework start.
"""

from __future__ import annotations

from typing import Any

import rljob_contract as contract

from ..api.spec import JobSpec
from ..frameworks import framework
from .identity import JobRef, pod_name
from .launchers import launcher_of


def marks_steps(spec: JobSpec, rank: int) -> bool:
    """Whether the pod of `rank` runs the trainer of a framework whose steps rljob sees."""
    runs_trainer = not launcher_of(spec).DRIVER_ON_HEAD or rank == 0
    return framework(spec.framework).reports_steps and runs_trainer


def marker(job: JobRef, attempt: int, rank: int) -> str:
    return f"/tmp/rljob-trained-{job.uid[:8]}-{pod_name(job.name, attempt, rank)}"


def probe(path: str) -> dict[str, Any]:
    return {"exec": {"command": ["test", "-e", path]}, "periodSeconds": 1, "failureThreshold": 1}


def env(path: str) -> dict[str, str]:
    return {contract.ENV_TRAINED_MARKER: path}
