"""When a trainer pod is Ready: once its attempt has finished a training step, where rljob sees
the framework's steps (frameworks: `reports_steps`).

The pod that runs the trainer (every torchrun pod; a Ray gang's head, which runs the driver)
gets an emptyDir, the variable that names a marker file in it, and a readiness probe that
tests the file every second. The trainer (rljob's own), rljob's bridge into the framework's
loop (TRL), or the Ray head's node program, from the bridge's progress record (verl, RLinf),
creates the file once a step of the attempt has finished in that container. So the pod turns
Ready then, the pod watch the operator already has delivers it, and no request is made per
step (reconcile.goodput). A container that restarts starts without the file.
"""

from __future__ import annotations

from typing import Any

import rljob_contract as contract

from ..api.spec import JobSpec
from ..frameworks import framework
from .launchers import launcher_of

VOLUME = "rljob-run"
DIRECTORY = "/var/run/rljob"
MARKER = f"{DIRECTORY}/trained"


def marks_steps(spec: JobSpec, rank: int) -> bool:
    """Whether the pod of `rank` runs the trainer of a framework whose steps rljob sees."""
    runs_trainer = not launcher_of(spec).DRIVER_ON_HEAD or rank == 0
    return framework(spec.framework).reports_steps and runs_trainer


def probe() -> dict[str, Any]:
    return {
        "exec": {"command": ["test", "-e", MARKER]},
        "periodSeconds": 1,
        "failureThreshold": 1,
    }


def env() -> dict[str, str]:
    return {contract.ENV_TRAINED_MARKER: MARKER}


def volume_and_mount() -> tuple[dict[str, Any], dict[str, Any]]:
    return {"name": VOLUME, "emptyDir": {}}, {"name": VOLUME, "mountPath": DIRECTORY}
