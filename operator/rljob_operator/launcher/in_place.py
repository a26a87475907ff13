"""What a pod needs to be restarted in place (spec.restartPolicy.inPlace), and the word that
tells a kept pod what to run next.

When a pod of a running gang is lost, the others need not go through the scheduler, the
volume attach, the image and the framework's cold start again: their trainer container is
started again in the same pod, on the same node, and only the lost pod is replaced. The
trainer container runs under rljob's wrapper (rljob_podside/rljob_in_place.py), with a restart
rule on rljob's exit code (KEP-5307's rules, KEP-5532's action `RestartAllContainers`, beta and
on by default in Kubernetes 1.36): the kubelet starts the pod's containers again in the pod at
once. Not the action `Restart`, which restarts the one container: the kubelet's crash-loop
back-off applies to it, 10 s at its second restart, 20 s at its third, and a gang preempted
every few minutes would wait longer for it than for new pods (benchmarks/in_place.py). The pod
spec cannot change, so the next run's arguments and resume switch reach the restarted wrapper
through the pod annotation `rljob.io/run`, projected into a file (rljob_contract.in_place).
"""

from __future__ import annotations

from typing import Any

import rljob_contract as contract
from rljob_contract.in_place import RunWord, format_word

from ..api.spec import JobSpec
from .podside import LAUNCHER_DIR, Programs

WRAPPER = "rljob_in_place.py"  # in rljob_podside, shipped in the job's launcher ConfigMap
STATE_VOLUME = "rljob-in-place"  # an emptyDir: it outlives the container, not the pod
STATE_DIR = "/etc/rljob/in-place"
RESTART_RULES = [
    {
        "action": "RestartAllContainers",
        "exitCodes": {"operator": "In", "values": [contract.EXIT_RESTART_IN_PLACE]},
    }
]


def wrapped(command: list[str], python: str = "python3") -> list[str]:
    """The container's command under the wrapper (run by the image's `python`), which learns
    how many of the words before the pod's arguments are the command's (a new run replaces
    the arguments)."""
    return [python, f"{LAUNCHER_DIR}/{WRAPPER}", str(len(command)), *command]


def container_fields() -> dict[str, Any]:
    return {"restartPolicy": "Never", "restartPolicyRules": RESTART_RULES}


def shipped(spec: JobSpec, programs: Programs) -> Programs:
    """A launcher's pod-side programs, and the wrapper where the job restarts in place."""
    return programs + ((WRAPPER,) if spec.restart_policy.in_place else ())


# How long a trainer that ended by itself waits for the operator's word before its container
# ends as the trainer did: the operator sees a lost peer and writes the word within a second
# or two; a failure of the whole gang is reported this much later.
WORD_WAIT_SECONDS = 10


def env() -> dict[str, str]:
    return {
        contract.ENV_RUN_FILE: f"{contract.PODINFO_MOUNT_PATH}/{contract.RUN_FILE_NAME}",
        contract.ENV_IN_PLACE_STATE_DIR: STATE_DIR,
        contract.ENV_IN_PLACE_WAIT: str(WORD_WAIT_SECONDS),
    }


RUN_FILE_ITEM = {
    "path": contract.RUN_FILE_NAME,
    "fieldRef": {"fieldPath": f"metadata.annotations['{contract.RUN_ANNOTATION}']"},
}


def state_volume_and_mount() -> tuple[dict[str, Any], dict[str, Any]]:
    return {"name": STATE_VOLUME, "emptyDir": {}}, {"name": STATE_VOLUME, "mountPath": STATE_DIR}


def has_restart_rule(pod: dict[str, Any]) -> bool:
    """Whether the pod as stored keeps rljob's restart rule: an API server without
    ContainerRestartRules drops it."""
    containers = (pod.get("spec") or {}).get("containers") or []
    return any(x.get("restartPolicyRules") == RESTART_RULES for x in containers)


def stop_patch(attempt: int, restarts_now: int) -> dict[str, Any]:
    """The metadata patch that tells a kept pod to stop its run and wait for attempt
    `attempt`."""
    return {
        "annotations": {
            contract.RUN_ANNOTATION: format_word(RunWord(attempt, restarts=restarts_now))
        }
    }


def run_patch(
    attempt: int,
    args: list[str],
    env_: dict[str, str | None],
    restarts_now: int,
    labels: dict[str, str],
) -> dict[str, Any]:
    """The metadata patch that makes a kept pod one of attempt `attempt`'s gang: its labels,
    and the run its waiting wrapper starts; the last attempt's checkpoint request goes (its
    file would tell the new run's trainer to save and stop at once)."""
    run = RunWord(attempt, tuple(args), env_, restarts_now)
    annotations = {contract.RUN_ANNOTATION: format_word(run),
                   contract.CHECKPOINT_REQUEST_ANNOTATION: None}  # fmt: skip
    return {"labels": labels, "annotations": annotations}
