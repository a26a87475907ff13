"""Readable builders for jobs, pods and nodes as the API server returns them (plain dicts)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rljob_operator import constants as c
from rljob_operator.launcher import podside, ray
from rljob_operator.launcher.pods import desired_pods
from rljob_operator.reconcile.snapshot import job_ref

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


def make_job(name: str = "grpo", nnodes: int = 2, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": name, "namespace": "ns", "uid": "uid-1", "generation": 1},
        "spec": {"image": "trainer:1", "nnodes": nnodes, **spec},
        "status": {},
    }


def make_pod(
    job: dict[str, Any],
    attempt: int,
    rank: int,
    phase: str = "Running",
    node: str | None = "gpu-node-0",
    exit_code: int | None = None,
    termination_reason: str | None = None,
    disruption: str | None = None,
    deleting: bool = False,
    status_reason: str | None = None,
    ready_since: str | None = None,
) -> dict[str, Any]:
    """A pod of the job as the cluster would show it after the kubelet reported `phase`;
    `ready_since`: Ready from then on (its readiness probe passed)."""
    from rljob_operator.api.spec import parse_spec

    pod = copy.deepcopy(desired_pods(parse_spec(job["spec"]), job_ref(job), attempt, None)[rank])
    pod["spec"]["nodeName"] = node
    status: dict[str, Any] = {"phase": phase, "conditions": []}
    if exit_code is not None:
        status["containerStatuses"] = [
            {
                "name": c.TRAINER_CONTAINER,
                "state": {"terminated": {"exitCode": exit_code, "reason": termination_reason}},
            }
        ]
    if disruption:
        status["conditions"].append(
            {"type": "DisruptionTarget", "status": "True", "reason": disruption}
        )
    if status_reason:
        status["reason"] = status_reason
    if ready_since:
        status["conditions"].append(
            {"type": "Ready", "status": "True", "lastTransitionTime": ready_since}
        )
    if deleting:
        pod["metadata"]["deletionTimestamp"] = "2026-11-29T11:59:00Z"
    pod["status"] = status
    return pod


def make_node(
    name: str = "gpu-node-0",
    ready: bool = True,
    since: str = "2026-11-29T11:00:00Z",
    taints: list[str] = (),
) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"taints": [{"key": t, "effect": "NoSchedule"} for t in taints]},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "Unknown",
                    "lastTransitionTime": since,
                }
            ]
        },
    }


def mounted_launcher(root: Path) -> Path:
    """The Ray launcher's files as a kubelet lays out its ConfigMap's items, with every Ray
    framework's hooks (a custom job's); the folder."""
    for path, text in podside.launcher_files((*ray.POD_PROGRAMS, *ray.all_hooks())).items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root
